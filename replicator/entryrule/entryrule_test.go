package entryrule

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Which entries the pipe forwards to west, and why it skips the others.
func TestSkipReason(t *testing.T) {
	markerProp := []wire.KeyValue{{Key: marker.Property, Value: "1"}}
	tests := []struct {
		name string
		md   wire.Metadata
		want string
	}{
		{"application data", wire.Metadata{ProducerName: "app"}, ""},
		{"a batch of application data", wire.Metadata{ProducerName: "app", HasNumMessagesInBatch: true, NumMessagesInBatch: 5}, ""},
		{"Pulsar's own marker", wire.Metadata{ProducerName: "app", HasMarkerType: true}, SkipMarker},
		{"a copy (replicated_from)", wire.Metadata{ProducerName: "app", ReplicatedFrom: "north"}, SkipRemoteOrigin},
		{"a marker writer's entry", wire.Metadata{ProducerName: marker.MarkerProducerName("east", "west")}, SkipMarker},
		{"a single message carrying the marker property", wire.Metadata{ProducerName: "app", Properties: markerProp}, SkipMarker},
		{"a batch carrying the marker property is data", wire.Metadata{ProducerName: "app", Properties: markerProp, HasNumMessagesInBatch: true}, ""},
		{"a sidecar producer's entry", wire.Metadata{ProducerName: marker.ProducerName("north", "east")}, SkipRemoteOrigin},
		{"replicate_to names the remote", wire.Metadata{ProducerName: "app", ReplicateTo: []string{"east", "west"}}, ""},
		{"replicate_to leaves the remote out", wire.Metadata{ProducerName: "app", ReplicateTo: []string{"east"}}, SkipReplicateTo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SkipReason(&tt.md, "west"); got != tt.want {
				t.Errorf("SkipReason() = %q, want %q", got, tt.want)
			}
		})
	}
}

// Which entries are markers, and which hold one as written.
func TestMarker(t *testing.T) {
	markerProp := []wire.KeyValue{{Key: marker.Property, Value: "1"}}
	writer := marker.MarkerProducerName("east", "west")
	tests := []struct {
		name     string
		md       wire.Metadata
		payload  []byte
		want     bool
		wantBody bool // a body: the entry holds one marker as written
	}{
		{"application data", wire.Metadata{ProducerName: "app"}, []byte("x"), false, false},
		{"a single message with the marker property", wire.Metadata{ProducerName: "app", Properties: markerProp}, []byte("m"), true, true},
		{"an empty marker", wire.Metadata{ProducerName: writer}, nil, true, true},
		{"another producer's batch with the marker property", wire.Metadata{ProducerName: "app", Properties: markerProp, HasNumMessagesInBatch: true}, []byte("m"), false, false},
		{"a marker writer's batch", wire.Metadata{ProducerName: writer, HasNumMessagesInBatch: true}, []byte("m"), true, false},
		{"compressed", wire.Metadata{ProducerName: writer, Compression: 1}, []byte("m"), true, false},
		{"encrypted", wire.Metadata{ProducerName: "app", Properties: markerProp, Encrypted: true}, []byte("m"), true, false},
		{"a chunk", wire.Metadata{ProducerName: writer, HasChunk: true}, []byte("m"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ok := Marker(&tt.md, tt.payload)
			if ok != tt.want || (body != nil) != tt.wantBody {
				t.Errorf("Marker() = %q, %v; want a marker %v, a body %v", body, ok, tt.want, tt.wantBody)
			}
		})
	}
}
