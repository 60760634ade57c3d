package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// TestMoveClient: subscription moves get a wire client of their own,
// built once from the cluster's settings (here a token file, read at
// Dial), apart from the entry pipe's; Close closes both.
func TestMoveClient(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(testJWT(`{"sub":"geo"}`)), 0o600); err != nil {
		t.Fatal(err)
	}
	cc := config.Cluster{Name: "east", ServiceURL: "pulsar://127.0.0.1:1", AdminURL: "http://127.0.0.1:1",
		Auth: config.Auth{TokenFile: tok}, KeepAlive: config.Duration{Duration: 30 * time.Second}}
	c, err := Dial(cc, zap.NewNop(), SecurityEvents{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.WireClient()
	if err != nil {
		t.Fatal(err)
	}
	move, err := c.MoveClient()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.MoveClient(); again != move {
		t.Errorf("MoveClient built twice")
	}
	if move == data {
		t.Fatal("moves share the entry pipe's client")
	}
	c.Close()
	for name, wc := range map[string]*wire.Client{"entry pipe": data, "move": move} {
		if _, err := wc.Conn(context.Background(), wire.Broker{Logical: "127.0.0.1:1", Physical: "127.0.0.1:1"}); !errors.Is(err, wire.ErrClosed) {
			t.Errorf("%s client after Close: %v, want ErrClosed", name, err)
		}
	}
}
