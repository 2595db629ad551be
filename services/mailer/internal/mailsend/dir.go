package mailsend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DirSender writes each message to <Dir>/<id>.eml (mode 0600: the mails
// carry codes and reset links). A message is written to a temporary file,
// synced, renamed into place and the directory synced, so a file either
// is complete or does not exist; sending the same id again replaces the
// file with the same content.
type DirSender struct{ Dir string }

// NewDirSender creates dir (0700) if needed.
func NewDirSender(dir string) (*DirSender, error) {
	if dir == "" {
		return nil, fmt.Errorf("mail dir is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &DirSender{Dir: dir}, nil
}

// Send writes m.
func (s *DirSender) Send(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.ID == "" || strings.ContainsAny(m.ID, `/\`) || strings.HasPrefix(m.ID, ".") {
		return &PermanentError{Err: fmt.Errorf("bad message id %q for a file name", m.ID)}
	}
	final := filepath.Join(s.Dir, m.ID+".eml")
	tmp, err := os.CreateTemp(s.Dir, ".tmp-"+m.ID+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; cleans up after a failure
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(m.Raw); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return err
	}
	d, err := os.Open(s.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
