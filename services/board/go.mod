module github.com/nubes-io/nubes/services/board

go 1.26.8

require github.com/nubes-io/nubes/pkg v0.0.0

replace github.com/nubes-io/nubes/pkg => ../../pkg
