package envoydiff

import "syscall"

// childAttr makes a child die with the test binary, and puts it in its own
// process group.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
