// Package kept remembers the MicroVMs this user launched and kept (`microvm
// run --keep`), so that a later command can reach one by its id alone: the
// endpoint, the agent token, the agent port and the control plane (endpoint
// and region) it was launched through, one file per MicroVM under the state
// directory's kept/ folder, readable by this user only.
//
// It is for the CLI's convenience and holds a secret, so what it must never
// do: write a file any other user can read (files 0600, the folder 0700), use
// a file someone else made readable (Load refuses it), take a path from an id
// (an id that is not a plain file name is refused), or keep a MicroVM's
// record once it is terminated (Forget removes it).
package kept

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// MicroVM is what reaches one kept MicroVM.
type MicroVM struct {
	ID         string `json:"microvm_id"`
	Endpoint   string `json:"endpoint"`
	AgentToken string `json:"agent_token"`
	Port       int    `json:"port,omitempty"`
	// ControlEndpoint is the control plane it was launched through, "" for
	// AWS's own; Region is that control plane's region.
	ControlEndpoint string    `json:"control_endpoint,omitempty"`
	Region          string    `json:"region,omitempty"`
	KeptAt          time.Time `json:"kept_at"`
}

// String never shows the token.
func (m MicroVM) String() string { return "kept MicroVM " + m.ID + " at " + m.Endpoint }

// GoString never shows the token either.
func (m MicroVM) GoString() string { return m.String() }

// ErrNotKept is Load's answer for an id with no record.
var ErrNotKept = errors.New("no kept MicroVM by that id")

// validID is an id that is a plain file name: the service's ids are
// letters, digits and dashes.
var validID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

// Dir is the kept folder under a state directory.
func Dir(stateDir string) string { return filepath.Join(stateDir, "kept") }

func path(stateDir, id string) (string, error) {
	if !validID().MatchString(id) {
		return "", fmt.Errorf("kept: %q is not a MicroVM id", id)
	}
	return filepath.Join(Dir(stateDir), id+".json"), nil
}

// Save writes m's record, replacing any earlier one, atomically and 0600.
func Save(stateDir string, m MicroVM) error {
	p, err := path(stateDir, m.ID)
	if err != nil {
		return err
	}
	if m.Endpoint == "" || m.AgentToken == "" {
		return fmt.Errorf("kept: %s has no endpoint or agent token to remember", m.ID)
	}
	if m.KeptAt.IsZero() {
		m.KeptAt = time.Now().UTC()
	}
	dir := Dir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("kept: %w", err)
	}
	// MkdirAll leaves an existing folder's mode alone.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("kept: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".kept-*") // 0600
	if err != nil {
		return fmt.Errorf("kept: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("kept: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("kept: %w", err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("kept: %w", err)
	}
	return nil
}

// Load reads id's record: ErrNotKept when there is none, an error when the
// file can be read by anyone but its owner.
func Load(stateDir, id string) (MicroVM, error) {
	p, err := path(stateDir, id)
	if err != nil {
		return MicroVM{}, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return MicroVM{}, ErrNotKept
	}
	if err != nil {
		return MicroVM{}, fmt.Errorf("kept: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return MicroVM{}, fmt.Errorf("kept: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return MicroVM{}, fmt.Errorf("kept: %s is readable by others (mode %04o), so its agent token is not used; chmod 600 it or delete it", p, st.Mode().Perm())
	}
	var m MicroVM
	if err := json.NewDecoder(f).Decode(&m); err != nil {
		return MicroVM{}, fmt.Errorf("kept: %s: %w", p, err)
	}
	if m.ID != id {
		return MicroVM{}, fmt.Errorf("kept: %s names %q, not %q", p, m.ID, id)
	}
	return m, nil
}

// Forget removes id's record; none is not an error.
func Forget(stateDir, id string) error {
	p, err := path(stateDir, id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kept: %w", err)
	}
	return nil
}

// IDs lists the kept MicroVMs' ids, sorted.
func IDs(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(Dir(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kept: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && validID().MatchString(id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}
