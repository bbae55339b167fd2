//go:build !linux

package consultest

import "syscall"

// agentProcAttr: only Linux has a parent-death signal; elsewhere an agent
// is stopped by Stop and the test's cleanup alone.
func agentProcAttr() *syscall.SysProcAttr { return nil }
