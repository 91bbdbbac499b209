module github.com/leased/leased/benchmarks/peerbench

go 1.26.8

require (
	github.com/leased/leased v0.0.0-00010101000000-000000000000
	github.com/quic-go/quic-go v0.65.0
	github.com/redis/rueidis v1.0.79
	go.etcd.io/etcd/client/v3 v3.5.35
	go.uber.org/zap v1.17.0
)

require (
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
)

require (
	github.com/coreos/go-semver v0.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.3.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.etcd.io/etcd/api/v3 v3.5.35 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.35 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/leased/leased => ../..
