package main

import "syscall"

// childAttr kills nats-server with this process, however it ends.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
