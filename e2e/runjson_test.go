package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
)

// runJSON runs the sidecar binary with args, a command that prints a
// --json report, and returns its exit status, the report decoded into a
// T and its stderr; a report that does not parse fails the test.
func runJSON[T any](t *testing.T, args ...string) (int, T, string) {
	t.Helper()
	cmd := exec.Command(Binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", args[0], err)
	}
	var rep T
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%s exited %d with a report that does not parse: %v\n%s\n%s", args[0], code, err, out.String(), errb.String())
	}
	return code, rep, errb.String()
}
