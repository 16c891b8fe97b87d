package grpcx

import (
	"testing"

	"google.golang.org/grpc/stats"
)

func TestTracedLeavesOutProbesAndWatchStreams(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"/quarry.v1.QueryService/Query", true},
		{"/quarry.v1.QueryService/QueryStream", true},
		{"/quarry.v1.SearchService/Resolve", true},
		{"/quarry.v1.KnowledgeService/SyncFiles", true},
		{"/grpc.health.v1.Health/Check", false},
		{"/grpc.health.v1.Health/Watch", false},
		{"/quarry.v1.SearchService/WatchGenerations", false},
	} {
		if got := traced(&stats.RPCTagInfo{FullMethodName: tc.method}); got != tc.want {
			t.Errorf("traced(%s) = %v, want %v", tc.method, got, tc.want)
		}
	}
}
