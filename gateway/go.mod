module github.com/quarry-router/quarry/gateway

go 1.26.0

replace (
	github.com/quarry-router/quarry/gen => ../gen
	github.com/quarry-router/quarry/platform => ../platform
)

require (
	github.com/quarry-router/quarry/gen v0.0.0-00010101000000-000000000000
	github.com/quarry-router/quarry/platform v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.24.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/blevesearch/snowballstem v0.9.0 // indirect
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)
