module github.com/nubes-io/nubes/test/plugin

go 1.26.8

require (
	github.com/nubes-io/nubes/pkg v0.0.0
	google.golang.org/grpc v1.65.0
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240701130421-f6361c86f094 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/nubes-io/nubes/pkg => ../../pkg
