// Command lockrun runs a command under a baton lock and reports, from
// `baton lock status NAME --json`, who held the lock and how the run ended.
//
//	lockrun [-baton PATH] [-dir DIR] [-no-wait | -wait DURATION] LOCK -- COMMAND [ARG...]
//
// It shows how a program in any language uses baton: run the CLI, read its
// --json output (described by schemas/lock-status.json) into a struct, and
// act on the documented exit codes. Fields this struct does not know are
// ignored, as baton's stability rule expects: a newer baton may add fields
// to an output, never remove one or change its type without a new schema
// version.
//
// lockrun exits with the run's exit code: the command's own, or baton's (75
// when the lock was busy, 124 on timeout, 125 when baton itself failed).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Exit codes of baton (README, "Exit codes"; baton_contract::exit).
const (
	exitNotAcquired   = 75  // busy with --no-wait, or --wait elapsed
	exitLockLost      = 76  // a PostgreSQL backend's session ended
	exitSuperseded    = 79  // superseded by a newer run of its group
	exitTimedOut      = 124 // the command ran past --timeout and was killed
	exitBatonFailed   = 125 // baton itself failed: usage, input, I/O
	exitNotExecutable = 126 // the command could not be executed
	exitNotFound      = 127 // the command was not found
	exitSignaledBase  = 128 // 128+N: the command was killed by signal N
)

// Process is who a process is (the acquired_for of a holder).
type Process struct {
	Pid       int32   `json:"pid"`
	StartTime uint64  `json:"start_time"`
	BootID    string  `json:"boot_id"`
	Host      string  `json:"host"`
	PidNs     *uint64 `json:"pid_ns"`
	PidNsInit *uint64 `json:"pid_ns_init"`
}

// Holder is one holder of a lock ($defs/HolderInfo of schemas/lock-status.json).
type Holder struct {
	Pid         int32    `json:"pid"`
	Host        string   `json:"host"`
	Owner       string   `json:"owner"`
	Operation   *string  `json:"operation"`
	RunID       string   `json:"run_id"`
	AcquiredAt  string   `json:"acquired_at"`
	Token       uint64   `json:"token"`
	Alive       bool     `json:"alive"`
	Liveness    string   `json:"liveness"` // alive, dead, unknown, not_visible, inherited
	Mode        string   `json:"mode"`     // exclusive, shared, semaphore
	Slot        uint32   `json:"slot"`
	Kind        string   `json:"kind"` // library, run, hold, git, other
	StartTime   uint64   `json:"start_time"`
	BootID      string   `json:"boot_id"`
	AcquiredFor *Process `json:"acquired_for"`
	PidNs       *uint64  `json:"pid_ns"`
	LocalPid    *int32   `json:"local_pid"`
}

// KernelHolder is a process that holds the lock according to the kernel.
type KernelHolder struct {
	Pid       int32    `json:"pid"`
	Command   string   `json:"command"`
	StartTime uint64   `json:"start_time"`
	Slots     []uint32 `json:"slots"`
}

// LockStatus is `baton lock status NAME --json` (schemas/lock-status.json).
type LockStatus struct {
	Name                    string         `json:"name"`
	Path                    string         `json:"path"`
	Held                    bool           `json:"held"`
	Mode                    *string        `json:"mode"`
	Max                     uint32         `json:"max"`
	Holder                  *Holder        `json:"holder"`
	Holders                 []Holder       `json:"holders"`
	Waiters                 uint64         `json:"waiters"`
	LastHolderDied          bool           `json:"last_holder_died"`
	LastHolder              *Holder        `json:"last_holder"`
	PreviousHolderDied      bool           `json:"previous_holder_died"`
	PreviousHolder          *Holder        `json:"previous_holder"`
	PreviousOutcome         *string        `json:"previous_outcome"` // released, failed:<code>, killed:<signal>, died
	LastToken               uint64         `json:"last_token"`
	Content                 string         `json:"content"` // ok, empty, unreadable, missing
	ContentError            *string        `json:"content_error"`
	HeldThroughReplacedFile []string       `json:"held_through_replaced_file"`
	ReplacedFileUnknown     bool           `json:"replaced_file_unknown"` // macOS: held through a deleted file cannot be seen
	KernelHolders           []KernelHolder `json:"kernel_holders"`
}

// Baton runs the baton command on one baton dir.
type Baton struct {
	Path string // the baton binary
	Dir  string // the baton dir ("": baton's own rules)
}

func (b Baton) command(args ...string) *exec.Cmd {
	if b.Dir != "" {
		args = append([]string{"--dir", b.Dir}, args...)
	}
	return exec.Command(b.Path, args...)
}

// Status reads `baton lock status NAME --json`.
func (b Baton) Status(name string) (*LockStatus, error) {
	cmd := b.command("lock", "status", name, "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("baton lock status %s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	var st LockStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("baton lock status %s: bad JSON: %v", name, err)
	}
	return &st, nil
}

func describe(h *Holder) string {
	return fmt.Sprintf("pid %d on %s (%s, owner %s, token %d, %s)",
		h.Pid, h.Host, h.Kind, h.Owner, h.Token, h.Liveness)
}

// ending says what an exit code of `baton run` means.
func ending(code int) string {
	switch {
	case code == 0:
		return "the command succeeded"
	case code == exitNotAcquired:
		return "not acquired: the lock is busy (exit 75)"
	case code == exitLockLost:
		return "the lock was lost (exit 76)"
	case code == exitSuperseded:
		return "superseded (exit 79)"
	case code == exitTimedOut:
		return "timed out and killed (exit 124)"
	case code == exitBatonFailed:
		return "baton failed, see its message (exit 125)"
	case code == exitNotExecutable:
		return "the command could not be executed (exit 126)"
	case code == exitNotFound:
		return "the command was not found (exit 127)"
	case code > exitSignaledBase && code < exitSignaledBase+65:
		return fmt.Sprintf("the command was killed by signal %d (exit %d)", code-exitSignaledBase, code)
	default:
		return fmt.Sprintf("the command exited %d", code)
	}
}

func main() {
	batonPath := flag.String("baton", "baton", "the baton binary")
	dir := flag.String("dir", "", "the baton dir (default: baton's own rules)")
	noWait := flag.Bool("no-wait", false, "fail at once (exit 75) if the lock is busy")
	wait := flag.Duration("wait", 0, "wait at most this long for the lock (exit 75 after)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: lockrun [-baton PATH] [-dir DIR] [-no-wait | -wait DURATION] LOCK -- COMMAND [ARG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) < 3 || args[1] != "--" {
		flag.Usage()
		os.Exit(2)
	}
	name, command := args[0], args[2:]
	b := Baton{Path: *batonPath, Dir: *dir}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, a ...interface{}) {
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
	}

	runArgs := []string{"run", "--lock", name}
	if *noWait {
		runArgs = append(runArgs, "--no-wait")
	} else if *wait > 0 {
		runArgs = append(runArgs, "--wait", wait.String())
	}
	runArgs = append(runArgs, "--")
	runArgs = append(runArgs, command...)
	run := b.command(runArgs...)
	run.Stdin, run.Stdout, run.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := run.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "lockrun: cannot start %s: %v\n", b.Path, err)
		os.Exit(exitBatonFailed)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()

	// While it runs: who holds the lock? Our `baton run` once it is granted.
	seen := false
	var runErr error
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case runErr = <-done:
			break wait
		case <-tick.C:
			if seen {
				continue
			}
			st, err := b.Status(name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "lockrun: %v\n", err)
				continue
			}
			if st.Held && st.Holder != nil && int(st.Holder.Pid) == run.Process.Pid {
				say("held: %s by %s", st.Name, describe(st.Holder))
				if st.PreviousHolderDied && st.PreviousHolder != nil {
					say("note: the previous holder, %s, died holding it: its work may be half done",
						describe(st.PreviousHolder))
				}
				seen = true
			} else if st.Held && st.Holder != nil && st.Waiters > 0 {
				say("waiting: %s is held by %s", st.Name, describe(st.Holder))
			}
		}
	}

	code := 0
	var exitErr *exec.ExitError
	if errors.As(runErr, &exitErr) {
		code = exitErr.ExitCode()
		if code < 0 { // baton itself was killed by a signal
			code = exitBatonFailed
		}
	} else if runErr != nil {
		fmt.Fprintf(os.Stderr, "lockrun: %v\n", runErr)
		code = exitBatonFailed
	}

	st, err := b.Status(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockrun: %v\n", err)
		os.Exit(exitBatonFailed)
	}
	if code == exitNotAcquired && st.Holder != nil {
		say("busy: %s is held by %s", st.Name, describe(st.Holder))
	}
	say("ended: %s", ending(code))
	if st.Held {
		say("now: %s held by %d holder(s), last token %d", st.Name, len(st.Holders), st.LastToken)
	} else {
		say("now: %s free, last token %d", st.Name, st.LastToken)
	}
	os.Exit(code)
}
