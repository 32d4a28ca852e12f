package replay

import "google.golang.org/protobuf/proto"

// RawCodec is a gRPC codec (use with grpc.ForceCodec) that sends a
// pre-marshalled request, a *[]byte, as it is and encodes anything else,
// and decodes every answer, as protobuf. A load or attack client uses it
// to keep its own encoding out of what it times.
type RawCodec struct{}

// Name is "proto": the server sees an ordinary protobuf call.
func (RawCodec) Name() string { return "proto" }

// Marshal returns a *[]byte's bytes, or v marshalled.
func (RawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

// Unmarshal decodes data into v, a proto.Message.
func (RawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
