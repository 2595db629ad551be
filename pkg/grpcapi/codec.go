package grpcapi

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// An answer goes out as the handler's JSON (the same bytes HTTP writes,
// masks and `only` trimming applied) written straight into the response
// message's wire form (jsonwire.Encode); the codec sends those bytes as
// they are.

// wireAnswer is a response already in protobuf wire form.
type wireAnswer []byte

// codec is grpc-go's proto codec, but that a wireAnswer is sent as it is
// and a wireRequest kept as it came.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(wireAnswer); ok {
		return mem.BufferSlice{mem.SliceBuffer(w)}, nil
	}
	return c.proto.Marshal(v)
}

// wireRequest is a request kept in wire form (jsonwire.FromWire reads it).
type wireRequest []byte

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireRequest); ok {
		*w = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (c codec) Name() string { return c.proto.Name() }
