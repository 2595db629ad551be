package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/grpcapi"
)

// grpcService calls the bench's server over gRPC, as a client built from
// its descriptors would (a dynamic message per call, token in metadata).
type grpcService struct {
	conn  *grpc.ClientConn
	get   grpcapi.Method
	id    protoreflect.FieldDescriptor
	token string
}

func dialGRPC(addr string, s *grpcapi.Server, token string) (*grpcService, error) {
	g := &grpcService{token: token}
	for _, m := range s.Descriptors().Methods {
		if m.FullMethod() == "/spaceone.api.board.v1.Post/get" {
			g.get = m
		}
	}
	if g.get.In == nil {
		return nil, fmt.Errorf("no gRPC method for /board/v1/post/get")
	}
	g.id = g.get.In.Fields().ByName("post_id")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	g.conn = conn
	return g, nil
}

// getPost is /spaceone.api.board.v1.Post/get of one post.
func (g *grpcService) getPost(ctx context.Context, id string) error {
	in := dynamicpb.NewMessage(g.get.In)
	in.Set(g.id, protoreflect.ValueOfString(id))
	out := dynamicpb.NewMessage(g.get.Out)
	return g.conn.Invoke(metadata.AppendToOutgoingContext(ctx, "token", g.token), g.get.FullMethod(), in, out)
}
