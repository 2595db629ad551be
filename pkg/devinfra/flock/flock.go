// Package flock is an exclusive lock on a file, between processes: the
// test binaries of one run and the run's testinfra agree through it on
// who starts the store and the broker.
//
// It must stay free of Nubes' other packages: testkit imports it without
// the store's dependencies.
package flock

import (
	"os"
	"syscall"
)

// Lock holds an exclusive lock on path (created if missing) until the
// returned func; it waits while another process holds it.
func Lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
