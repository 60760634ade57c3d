package main

// What the sidecars' own logs say about a finding: the Warn line of an
// entry sent under a counted sequence id (docs/guarantees.md, Order and
// Duplicates) is the sidecar saying that a copy may be stored twice
// because its read-back did not find it.

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"time"
)

// msgCounted is the sidecar's Warn message for an entry sent under a
// counted sequence id.
const msgCounted = "entry sent under a counted sequence id, not its position's: should an earlier session's copy of it still arrive, the remote stores it twice"

// CountedSend is one such Warn line: on which pair and partition, when,
// and the entry's source position.
type CountedSend struct {
	Instance, Source, Target, Partition, ID string
	At                                      time.Time
}

// scanCounted reads one instance's log (JSON lines, with the soak's own
// start lines between them) for counted sends.
func scanCounted(instance string, r io.Reader) ([]CountedSend, error) {
	var out []CountedSend
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Msg       string    `json:"msg"`
			TS        time.Time `json:"ts"`
			Source    string    `json:"source"`
			Target    string    `json:"target"`
			Partition string    `json:"partition"`
			ID        string    `json:"id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != msgCounted {
			continue
		}
		out = append(out, CountedSend{Instance: instance, Source: l.Source, Target: l.Target, Partition: l.Partition, ID: l.ID, At: l.TS})
	}
	return out, sc.Err()
}

// scanCountedFiles scans every instance's log file.
func scanCountedFiles(logs map[string]string) ([]CountedSend, error) {
	var out []CountedSend
	for name, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		c, err := scanCounted(name, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// countedFor returns the counted sends of a finding's stream: its
// origin to its cluster, on its partition.
func countedFor(f Finding, counted []CountedSend) []CountedSend {
	var out []CountedSend
	for _, c := range counted {
		if c.Source == f.Origin && c.Target == f.Cluster && c.Partition == f.Partition {
			out = append(out, c)
		}
	}
	return out
}
