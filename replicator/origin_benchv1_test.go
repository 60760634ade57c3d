package replicator

import "github.com/geo-sidecar/geo-sidecar/marker"

func benchPartition() *entryPartition {
	return &entryPartition{local: "east", remote: "west", topic: "persistent://t/ns/x-partition-0", keys: marker.NewKeys([]byte("0123456789abcdef"))}
}

func benchProof(p *entryPartition) func(entryCopy) bool {
	return bySignature(p.keys, p.topic, p.remote)
}
