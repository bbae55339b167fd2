package consultest

import "syscall"

// agentProcAttr makes the kernel kill the agent when the test binary that
// started it dies (a timeout's panic, a kill), so no agent outlives it
// holding its ports.
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
