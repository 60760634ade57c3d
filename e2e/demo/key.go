package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The demo's marker key is kept between runs, beside the test bed's state
// (the project's cache folder): the copies a run makes are signed with
// it, and the next run's drill and any geo-sidecar verify on the same
// clusters check them with the key of the config, so a new key each run
// made the first run's copies unproven.

// demoStateDir is where the demo keeps its state:
// $XDG_CACHE_HOME/geo-sidecar/demo, or ~/.cache/geo-sidecar/demo.
func demoStateDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no cache folder for the demo's key: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "geo-sidecar", "demo"), nil
}

// markerKeyFile returns the path of the demo's marker key in dir,
// creating dir and the key (32 random bytes, hex) the first time and
// keeping it after: idempotent, and safe when two runs start at once
// (the key is written under a temporary name and linked into place,
// which fails if the other run got there first; the file is never seen
// half written).
func markerKeyFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("demo state folder: %w", err)
	}
	path := filepath.Join(dir, "marker.key")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return path, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("demo marker key: %w", err)
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "marker.key.*")
	if err != nil {
		return "", fmt.Errorf("demo marker key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key[:]) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("demo marker key: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return "", fmt.Errorf("demo marker key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("demo marker key: %w", err)
	}
	return path, nil
}
