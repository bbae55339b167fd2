// Package upgrade is edge's process upgrade: it starts a new binary with
// this process's listening sockets and the hand-off socket, waits until
// the new process serves, and in the new process takes those sockets
// over, so no connection attempt is refused and the accept queues survive
// (HAProxy's `-x`, nginx's USR2). It also owns the policy of when an
// upgrade may start: one at a time, only once this process serves and its
// own predecessor has exited, never from a container's PID 1, and, with
// a Gate (a fleet's Consul semaphore, fleet.UpgradeSlots), only with
// one of the fleet's slots, waited for up to a bound and held until the
// hand-off is over (HandOffDone).
//
// Why its own implementation and not github.com/cloudflare/tableflip,
// which edge used before: tableflip starts os.Args[0] with os.Args[1:] and
// os.Environ(), with no option for either (its process-starting hook is a
// field of an unexported struct), so the caller had to rewrite os.Args[0]
// and NOTIFY_SOCKET around each Upgrade; it allows one Upgrader per
// process, so it could only be tested through a built binary; and it
// leaves descriptors to finalizers (a replaced AddFile, the pipes of a
// failed attempt), which the caller closed with forced collections. What
// edge needs of it is small: os/exec with ExtraFiles, two pipes and a name
// list. Here every part of the new process is given (Child: path,
// arguments, environment, directory), any number of Upgraders may exist
// (each test makes its own), and every descriptor has one owner that
// closes it at a known point: the new process's pipe ends right after
// exec, a failed attempt's pipes and hand-off socket when it fails, the
// unclaimed inherited sockets at Ready, the copies kept for handing on at
// Stop or once a new process took over, a carried state's pipe as soon as
// the attempt that passed it is over.
//
// The wire is tableflip v1.2.3's (names.go), so an edge built on tableflip
// upgrades to this one and this one back to it: descriptor 3 is the pipe
// the new process writes one byte to once it serves, descriptor 4 the
// pipe it reads the names of descriptors 5 and up from (one gob of
// [][]string) and then to its end, which comes when the old process has
// exited (the kernel closes the old process's end; nothing else holds it).
// What the new process reads there is bounded in size and count, and every
// named descriptor must be open; otherwise upgrades are off and the new
// process binds its own sockets, which fails at the admin address, so its
// parent keeps serving.
//
//	upgrader.go  Upgrader: Listen, InheritedHandoff, Ready, Upgrade, State, Stop; the refusals
//	handover.go  HandOver: the old process's end once the new one serves, over Server
//	process.go   Child; starting it behind the two pipes and waiting for its byte; the new process's side
//	names.go     the wire's constants and names, bounded decoding; the set of inherited and passed files
//	carry.go     Carry, Carried: state a component hands the new process, in an inherited pipe (ticket keys)
//	sys_*.go     duplicating descriptors, the hand-off socketpair (Unix); refusals (Windows)
//	binary.go    SelfBinary: the path this process was started as
package upgrade
