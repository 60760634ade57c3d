package wire

import (
	"bytes"
	"errors"
	"testing"
)

// cut returns md without the fields at spans (which do not overlap).
func cut(md []byte, spans []Span) []byte {
	var out []byte
	at := 0
	for at < len(md) {
		next, skip := len(md), -1
		for i, s := range spans {
			if s.End > 0 && s.Start >= at && s.Start < next {
				next, skip = s.Start, i
			}
		}
		out = append(out, md[at:next]...)
		if skip < 0 {
			break
		}
		at = spans[skip].End
	}
	return out
}

func TestLastProperties(t *testing.T) {
	base := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2,
		Properties: []KeyValue{{"app", "v"}, {"o", "app's own"}}, NumMessagesInBatch: 3}.Append(nil)
	keys := []string{"o", "s", "missing"}
	tests := []struct {
		name     string
		md       []byte
		wantCut  []byte // md without the last o and s
		wantErr  bool
		wantZero []bool // per key
	}{
		{"appended last", AppendProperties(bytes.Clone(base), KeyValue{"o", "1:2"}, KeyValue{"s", "sig"}), base, false, []bool{false, false, true}},
		{"only the entry's own", base, MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2,
			Properties: []KeyValue{{"app", "v"}}, NumMessagesInBatch: 3}.Append(nil), false, []bool{false, true, true}},
		{"properties wire type", append(bytes.Clone(base), 4<<3|0, 1), nil, true, nil},
		{"property without a value", append(bytes.Clone(base), 4<<3|2, 3, 1<<3|2, 1, 'o'), nil, true, nil},
		{"truncated", base[:len(base)-1], nil, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans := make([]Span, len(keys))
			err := LastProperties(tt.md, keys, spans)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("LastProperties() = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, z := range tt.wantZero {
				if (spans[i] == Span{}) != z {
					t.Errorf("span of %q = %+v, want zero %v", keys[i], spans[i], z)
				}
			}
			if got := cut(tt.md, spans); !bytes.Equal(got, tt.wantCut) {
				t.Errorf("without the last o and s:\n got %x\nwant %x", got, tt.wantCut)
			}
		})
	}
	if err := LastProperties(base, keys, nil); err == nil {
		t.Error("LastProperties with too few spans succeeded")
	}
}

// FuzzLastProperties: on any input, no panic; on metadata ParseMetadata
// accepts, LastProperties succeeds, each span holds the property
// Metadata.Property returns, and what AppendProperties appends is found
// and cut out exactly.
func FuzzLastProperties(f *testing.F) {
	f.Add(MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, Properties: []KeyValue{{"k", "v"}, {"o", "x"}}, NumMessagesInBatch: 3}.Append(nil))
	f.Add(AppendProperties(MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil), KeyValue{"o", "1"}, KeyValue{"s", "2"}))
	f.Add([]byte{4<<3 | 2, 0x80})
	keys := []string{"o", "s"}
	f.Fuzz(func(t *testing.T, b []byte) {
		spans := make([]Span, len(keys))
		err := LastProperties(b, keys, spans)
		m, perr := ParseMetadata(b)
		if perr != nil {
			return
		}
		if err != nil {
			t.Fatalf("ParseMetadata accepts what LastProperties refuses: %v", err)
		}
		for i, k := range keys {
			v, ok := m.Property(k)
			if ok != (spans[i] != Span{}) {
				t.Fatalf("%q: Property ok %v, span %+v", k, ok, spans[i])
			}
			if ok {
				one, err := ParseMetadata(append(MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil), b[spans[i].Start:spans[i].End]...))
				if got, _ := one.Property(k); err != nil || got != v {
					t.Fatalf("%q: span %+v holds %q (%v), Property says %q", k, spans[i], got, err, v)
				}
			}
		}
		plain := cut(b, spans)
		patched := AppendProperties(bytes.Clone(plain), KeyValue{"o", "1:2:-1"}, KeyValue{"s", "v2.sig"})
		if err := LastProperties(patched, keys, spans); err != nil {
			t.Fatalf("appended to what parsed: %v", err)
		}
		if got := cut(patched, spans); !bytes.Equal(got, plain) {
			t.Fatalf("appended properties not cut exactly:\n got %x\nwant %x", got, plain)
		}
	})
}
