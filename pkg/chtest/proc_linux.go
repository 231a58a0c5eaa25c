package chtest

import "syscall"

// sysProcAttr makes the kernel kill the server when the test process dies,
// so a crashed or timed-out test leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
