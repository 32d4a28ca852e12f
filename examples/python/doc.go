// Package python holds the Python gateway example (gateway.py) and the Go
// test that runs it, under Debian's /usr/bin/python3 with python3-grpcio,
// against a real router.
package python
