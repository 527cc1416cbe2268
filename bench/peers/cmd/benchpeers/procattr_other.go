//go:build !linux

package main

import "syscall"

// childAttr: no parent-death signal outside Linux; the harness stops its
// children on every exit path it controls.
func childAttr() *syscall.SysProcAttr { return nil }
