package testkit

import "syscall"

// childAttr kills a test's nats-server with the test binary, however it
// ends (a timeout's panic included).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
