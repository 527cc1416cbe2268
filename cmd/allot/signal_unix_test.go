package main

import "syscall"

var interruptSignal = syscall.SIGINT
