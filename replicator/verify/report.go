package verify

import "time"

// The report as JSON (geo-sidecar verify --json): positions as
// "ledger:entry:batch", publish times as RFC 3339, counts as numbers.

// JSONReport is Report for encoding/json.
type JSONReport struct {
	Topic         string `json:"topic"`
	From          string `json:"from"`
	To            string `json:"to"`
	Authenticated bool   `json:"authenticated"`
	// Keys are the ids of the marker keys origins were tried under
	// (verify.KeyID), the current one first.
	Keys       []string        `json:"keys_tried,omitempty"`
	Since      string          `json:"since,omitempty"`
	Faults     int64           `json:"faults"`
	Partitions []JSONPartition `json:"partitions"`
	Messages   int64           `json:"messages_read"`
	Bytes      int64           `json:"bytes_read"`
	Seconds    float64         `json:"seconds"`
}

// JSONPartition is one partition's verdict for encoding/json.
type JSONPartition struct {
	Partition     string `json:"partition"`
	SourceEntries int64  `json:"source_entries"`
	TargetEntries int64  `json:"target_entries"`
	Expected      int64  `json:"expected"`
	Skipped       int64  `json:"not_forwarded"`
	Present       int64  `json:"present"`
	NotYetCopied  int64  `json:"not_yet_copied"`
	Missing       int64  `json:"missing"`
	Duplicated    int64  `json:"duplicated"`
	Divergent     int64  `json:"divergent"`
	OutOfOrder    int64  `json:"out_of_order"`
	// PresentUnproven: copies with the source's bytes whose origin no key
	// tried proves.
	PresentUnproven int64        `json:"present_unproven"`
	SourceGone      int64        `json:"source_gone"`
	TargetOnly      int64        `json:"target_only"`
	Local           int64        `json:"target_local"`
	OtherOrigin     int64        `json:"target_other_origins"`
	Markers         int64        `json:"target_markers"`
	Unreadable      int64        `json:"target_unreadable"`
	BeforeRange     int64        `json:"before_range"`
	Through         *JSONThrough `json:"verified_through"`
	// Unproven is what of the source read lies past verified_through;
	// null when nothing does.
	Unproven *JSONUnproven `json:"unproven"`
	// NotHeld is what of the source read the target holds no copy of
	// with its bytes; null when it holds everything.
	NotHeld  *JSONUnproven `json:"not_held"`
	Findings []JSONFinding `json:"findings"`
}

// JSONUnproven is Unproven for encoding/json.
type JSONUnproven struct {
	Entries  int64 `json:"entries"`
	Messages int64 `json:"messages"`
	// First and last publish times of those entries, and the seconds of
	// traffic between them.
	FirstPublishTime string  `json:"first_publish_time"`
	LastPublishTime  string  `json:"last_publish_time"`
	Seconds          float64 `json:"seconds"`
}

// JSONThrough is Through for encoding/json.
type JSONThrough struct {
	Origin      string `json:"origin"`
	PublishTime string `json:"publish_time"`
	Target      string `json:"target,omitempty"` // where the copy at or before origin is
}

// JSONFinding is Finding for encoding/json.
type JSONFinding struct {
	Kind   Kind   `json:"kind"`
	Origin string `json:"origin"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// JSON is r as JSONReport.
func JSON(r Report) JSONReport {
	out := JSONReport{Topic: r.Topic, From: r.From, To: r.To, Authenticated: r.Authenticated, Keys: r.Keys, Faults: r.Faults(),
		Messages: r.Messages, Bytes: r.Bytes, Seconds: r.Elapsed.Seconds(), Partitions: []JSONPartition{}}
	if !r.Since.IsZero() {
		out.Since = r.Since.UTC().Format(time.RFC3339)
	}
	for _, p := range r.Partitions {
		jp := JSONPartition{Partition: p.Partition, SourceEntries: p.SourceEntries, TargetEntries: p.TargetEntries,
			Expected: p.Expected, Skipped: p.Skipped, Present: p.Present, NotYetCopied: p.NotYetCopied,
			Missing: p.Missing, Duplicated: p.Duplicated, Divergent: p.Divergent, OutOfOrder: p.OutOfOrder, PresentUnproven: p.PresentUnproven,
			SourceGone: p.SourceGone, TargetOnly: p.TargetOnly, Local: p.Local, OtherOrigin: p.OtherOrigin,
			Markers: p.Markers, Unreadable: p.Unreadable, BeforeRange: p.BeforeRange, Findings: []JSONFinding{}}
		if t := p.Through; t != nil {
			jp.Through = &JSONThrough{Origin: t.Origin.String(), PublishTime: time.UnixMilli(t.PublishTime).UTC().Format(time.RFC3339Nano)}
			if t.HasTarget {
				jp.Through.Target = t.Target.String()
			}
		}
		jp.Unproven, jp.NotHeld = jsonUnproven(p.Unproven), jsonUnproven(p.NotHeld)
		for _, f := range p.Findings {
			jf := JSONFinding{Kind: f.Kind, Origin: f.Origin.String(), Detail: f.Detail}
			if f.Target != nil {
				jf.Target = f.Target.String()
			}
			jp.Findings = append(jp.Findings, jf)
		}
		out.Partitions = append(out.Partitions, jp)
	}
	return out
}

func jsonUnproven(u Unproven) *JSONUnproven {
	if u.Entries == 0 {
		return nil
	}
	return &JSONUnproven{Entries: u.Entries, Messages: u.Messages,
		FirstPublishTime: time.UnixMilli(u.FirstPublishTime).UTC().Format(time.RFC3339Nano),
		LastPublishTime:  time.UnixMilli(u.LastPublishTime).UTC().Format(time.RFC3339Nano),
		Seconds:          float64(u.LastPublishTime-u.FirstPublishTime) / 1000}
}
