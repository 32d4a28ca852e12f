package server

import (
	"flag"
	"fmt"
)

// AccessOptions is the gRPC listener's access control in the router's
// configuration (YAML keys inlined at the top level of the file, and
// flags): TLS (mTLS with TLSClientCA) and bearer-token files per role.
type AccessOptions struct {
	TLSCert            string `yaml:"tls_cert"`
	TLSKey             string `yaml:"tls_key"`
	TLSClientCA        string `yaml:"tls_client_ca"`
	RouterTokensFile   string `yaml:"router_tokens_file"`
	RegistryTokensFile string `yaml:"registry_tokens_file"`
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *AccessOptions) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert, "PEM certificate (chain) of the gRPC listener; with --tls-key turns TLS on")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "PEM private key of --tls-cert")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", o.TLSClientCA, "PEM CA bundle; gRPC clients must present a certificate it signed (mTLS; needs --tls-cert)")
	fs.StringVar(&o.RouterTokensFile, "router-tokens-file", o.RouterTokensFile, "file of gateway bearer tokens, one a line: they may call kvrouter.v1.Router")
	fs.StringVar(&o.RegistryTokensFile, "registry-tokens-file", o.RegistryTokensFile, "file of operator bearer tokens, one a line: they may call kvrouter.v1.Registry and Router")
}

// Validate names the keys of settings that do not go together.
func (o *AccessOptions) Validate() error {
	switch {
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return fmt.Errorf("config: tls_cert and tls_key go together (got tls_cert %q, tls_key %q)", o.TLSCert, o.TLSKey)
	case o.TLSClientCA != "" && o.TLSCert == "":
		return fmt.Errorf("config: tls_client_ca %q needs tls_cert and tls_key (client certificates are checked in the TLS handshake)", o.TLSClientCA)
	}
	return nil
}
