package replicator

func benchPartition() *entryPartition {
	return &entryPartition{local: "east", remote: "west", topic: "persistent://t/ns/x-partition-0", key: []byte("0123456789abcdef")}
}

func benchProof(p *entryPartition) func(entryCopy) bool { return bySignature(p.key, p.topic) }
