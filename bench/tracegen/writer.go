package tracegen

import (
	"bufio"
	"io"
	"os"
	"strconv"
)

// Write writes reqs as Mooncake JSONL, one request a line, in the field
// order and spacing of Mooncake's own traces:
//
//	{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
func Write(w io.Writer, reqs []Request) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var buf []byte
	for _, r := range reqs {
		buf = append(buf[:0], `{"timestamp": `...)
		buf = strconv.AppendInt(buf, r.Timestamp(), 10)
		buf = append(buf, `, "input_length": `...)
		buf = strconv.AppendInt(buf, int64(r.InputLength), 10)
		buf = append(buf, `, "output_length": `...)
		buf = strconv.AppendInt(buf, int64(r.OutputLength), 10)
		buf = append(buf, `, "hash_ids": [`...)
		for i, id := range r.HashIDs {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = strconv.AppendUint(buf, id, 10)
		}
		buf = append(buf, "]}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes reqs to path ("-" is standard output).
func WriteFile(path string, reqs []Request) error {
	if path == "-" || path == "" {
		return Write(os.Stdout, reqs)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, reqs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
