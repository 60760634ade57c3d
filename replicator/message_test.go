package replicator

import (
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// fakeMsg is a pulsar.Message read from the local cluster. Only the methods
// the replicator uses are implemented; any other call panics on the nil
// embedded interface, which flags an unexpected dependency.
type fakeMsg struct {
	pulsar.Message

	id          pulsar.MessageID
	payload     []byte
	null        bool
	key         string
	orderingKey string
	props       map[string]string
	eventTime   time.Time
	publishTime time.Time
	replicated  bool
	producer    string
}

func (m *fakeMsg) ID() pulsar.MessageID          { return m.id }
func (m *fakeMsg) Payload() []byte               { return m.payload }
func (m *fakeMsg) IsNullValue() bool             { return m.null }
func (m *fakeMsg) Key() string                   { return m.key }
func (m *fakeMsg) OrderingKey() string           { return m.orderingKey }
func (m *fakeMsg) Properties() map[string]string { return m.props }
func (m *fakeMsg) EventTime() time.Time          { return m.eventTime }
func (m *fakeMsg) PublishTime() time.Time        { return m.publishTime }
func (m *fakeMsg) IsReplicated() bool            { return m.replicated }
func (m *fakeMsg) ProducerName() string          { return m.producer }

// msgAt is a plain message at position (ledger, entry, batch) of partition 0.
func msgAt(ledger, entry int64, batch int32, payload string) *fakeMsg {
	return &fakeMsg{
		id:          pulsar.NewMessageID(ledger, entry, batch, 0),
		payload:     []byte(payload),
		props:       map[string]string{},
		publishTime: time.UnixMilli(1_700_000_000_123),
	}
}

func TestDecide(t *testing.T) {
	const remote = "west"
	tests := []struct {
		name       string
		props      map[string]string
		replicated bool
		want       string
	}{
		{name: "plain", want: ""},
		{name: "unrelated properties", props: map[string]string{"a": "b"}, want: ""},
		{name: "marker", props: map[string]string{marker.Property: "x"}, want: skipMarker},
		{name: "marker with empty value", props: map[string]string{marker.Property: ""}, want: skipMarker},
		{name: "marker wins over origin",
			props: map[string]string{marker.Property: "x", PropOriginCluster: "north"}, want: skipMarker},
		{name: "remote origin", props: map[string]string{PropOriginCluster: "north"}, want: skipRemoteOrigin},
		{name: "remote origin with empty value", props: map[string]string{PropOriginCluster: ""}, want: skipRemoteOrigin},
		{name: "remote origin even if replicate-to names the remote",
			props: map[string]string{PropOriginCluster: "north", PropReplicateTo: remote}, want: skipRemoteOrigin},
		{name: "remote origin wins over broker-replicated",
			props: map[string]string{PropOriginCluster: "north"}, replicated: true, want: skipRemoteOrigin},
		{name: "broker replicated", replicated: true, want: skipBrokerReplica},
		{name: "broker replicated even if replicate-to names the remote",
			props: map[string]string{PropReplicateTo: remote}, replicated: true, want: skipBrokerReplica},
		{name: "replicate-to the remote", props: map[string]string{PropReplicateTo: "west"}, want: ""},
		{name: "replicate-to a list with the remote", props: map[string]string{PropReplicateTo: "north,west"}, want: ""},
		{name: "replicate-to with spaces", props: map[string]string{PropReplicateTo: " north , west "}, want: ""},
		{name: "replicate-to other remotes", props: map[string]string{PropReplicateTo: "north,south"}, want: skipReplicateTo},
		{name: "replicate-to a prefix of the remote", props: map[string]string{PropReplicateTo: "wes,west2"}, want: skipReplicateTo},
		{name: "replicate-to empty", props: map[string]string{PropReplicateTo: ""}, want: skipReplicateTo},
		{name: "replicate-to only commas", props: map[string]string{PropReplicateTo: " , "}, want: skipReplicateTo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := msgAt(1, 2, -1, "p")
			if tt.props != nil {
				m.props = tt.props
			}
			m.replicated = tt.replicated
			if got := decide(m, remote); got != tt.want {
				t.Errorf("decide() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecideNilProperties(t *testing.T) {
	m := msgAt(1, 2, -1, "p")
	m.props = nil
	if got := decide(m, "west"); got != "" {
		t.Errorf("decide() = %q, want forward", got)
	}
}

func TestCopyOf(t *testing.T) {
	pub := time.UnixMilli(1_700_000_000_123)
	event := time.UnixMilli(1_600_000_000_456)
	tests := []struct {
		name  string
		msg   *fakeMsg
		check func(t *testing.T, pm *pulsar.ProducerMessage)
	}{
		{
			name: "payload preserved",
			msg:  msgAt(7, 8, 9, "hello"),
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if string(pm.Payload) != "hello" {
					t.Errorf("payload = %q, want %q", pm.Payload, "hello")
				}
			},
		},
		{
			name: "empty payload stays non-nil empty",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0), payload: []byte{}},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if pm.Payload == nil || len(pm.Payload) != 0 {
					t.Errorf("payload = %#v, want non-nil empty", pm.Payload)
				}
			},
		},
		{
			name: "nil payload of a non-null message becomes empty",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0)},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if pm.Payload == nil || len(pm.Payload) != 0 {
					t.Errorf("payload = %#v, want non-nil empty", pm.Payload)
				}
			},
		},
		{
			name: "null value stays nil",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0), null: true, key: "k"},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if pm.Payload != nil {
					t.Errorf("payload = %#v, want nil (tombstone)", pm.Payload)
				}
				if pm.Value != nil {
					t.Errorf("value = %#v, want nil", pm.Value)
				}
				if pm.Key != "k" {
					t.Errorf("key = %q, want %q", pm.Key, "k")
				}
			},
		},
		{
			name: "key and ordering key",
			msg: &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0), payload: []byte("x"),
				key: "user-1", orderingKey: "ok-1"},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if pm.Key != "user-1" || pm.OrderingKey != "ok-1" {
					t.Errorf("key, ordering key = %q, %q, want %q, %q", pm.Key, pm.OrderingKey, "user-1", "ok-1")
				}
			},
		},
		{
			name: "event time kept",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0), eventTime: event},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if !pm.EventTime.Equal(event) {
					t.Errorf("event time = %v, want %v", pm.EventTime, event)
				}
			},
		},
		{
			name: "event time reported as Unix 0 left unset",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0), eventTime: time.Unix(0, 0)},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if !pm.EventTime.IsZero() {
					t.Errorf("event time = %v, want zero", pm.EventTime)
				}
			},
		},
		{
			name: "zero event time left unset",
			msg:  &fakeMsg{id: pulsar.NewMessageID(1, 1, -1, 0)},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if !pm.EventTime.IsZero() {
					t.Errorf("event time = %v, want zero", pm.EventTime)
				}
			},
		},
		{
			name: "origin properties",
			msg:  &fakeMsg{id: pulsar.NewMessageID(12, 34, 5, 3), publishTime: pub},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				want := map[string]string{
					PropOriginCluster:     "east",
					PropOriginID:          "12:34:5",
					PropOriginPublishTime: strconv.FormatInt(pub.UnixMilli(), 10),
				}
				if !maps.Equal(pm.Properties, want) {
					t.Errorf("properties = %v, want %v", pm.Properties, want)
				}
			},
		},
		{
			name: "origin id of a non-batched message",
			msg:  &fakeMsg{id: pulsar.NewMessageID(12, 34, -1, 0)},
			check: func(t *testing.T, pm *pulsar.ProducerMessage) {
				if got := pm.Properties[PropOriginID]; got != "12:34:-1" {
					t.Errorf("origin id = %q, want %q", got, "12:34:-1")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pm := copyOf(tt.msg, "east")
			tt.check(t, pm)
			if pm.Properties[PropOriginCluster] != "east" {
				t.Errorf("origin cluster = %q, want %q", pm.Properties[PropOriginCluster], "east")
			}
		})
	}
}

func TestCopyOfProperties(t *testing.T) {
	src := map[string]string{"app": "1", "trace": "abc", PropReplicateTo: "west"}
	orig := maps.Clone(src)
	m := msgAt(3, 4, -1, "x")
	m.props = src

	pm := copyOf(m, "east")

	for k, v := range orig {
		if pm.Properties[k] != v {
			t.Errorf("property %q = %q, want %q", k, pm.Properties[k], v)
		}
	}
	if len(pm.Properties) != len(orig)+3 {
		t.Errorf("properties = %v, want the %d source ones plus 3 origin ones", pm.Properties, len(orig))
	}
	if !maps.Equal(src, orig) {
		t.Errorf("source properties mutated: %v, want %v", src, orig)
	}
	pm.Properties["app"] = "changed"
	if src["app"] != "1" {
		t.Error("copy shares its properties map with the source message")
	}
	if pm.SequenceID != nil {
		t.Errorf("sequence id = %v, want nil", *pm.SequenceID)
	}
}

func TestPositionRoundTrip(t *testing.T) {
	for _, id := range []pulsar.MessageID{
		pulsar.NewMessageID(12, 34, 5, 0),
		pulsar.NewMessageID(12, 34, -1, 3),
		pulsar.NewMessageID(1<<40, 1<<40, 1<<20, 0),
	} {
		p, ok := marker.ParsePosition(positionOf(id).String())
		if !ok || p != positionOf(id) {
			t.Errorf("marker.ParsePosition(positionOf(%s).String()) = %v, %v; want %v, true", positionOf(id).String(), p, ok, positionOf(id))
		}
	}
}
