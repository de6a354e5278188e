// Package cpustat reads CPU times from Linux's /proc for the benchmarks:
// this process's, a process tree's (the PostgreSQL server and its
// backends) and the whole machine's. Elsewhere every reading fails.
package cpustat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times on Linux.
const clockTicks = 100

// Self is this process's CPU time, user and system, in seconds.
func Self() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// Exists reports whether /proc shows a process pid.
func Exists(pid int) bool {
	_, _, _, ok := procStat(pid)
	return ok
}

// ProcessTree is the CPU seconds of process root, of its children now
// running and of those it has reaped; false when root is not readable.
func ProcessTree(root int) (float64, bool) {
	_, own, reaped, ok := procStat(root)
	if !ok {
		return 0, false
	}
	total := own + reaped
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if ppid, own, _, ok := procStat(pid); ok && ppid == root {
			total += own
		}
	}
	return total, true
}

// HostBusy is the machine's CPU seconds not idle, all cores together.
func HostBusy() (float64, bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, false
	}
	var busy float64
	for k, v := range f[1:] {
		if k == 3 || k == 4 { // idle, iowait
			continue
		}
		if k >= 8 { // guest time is counted in user already
			break
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks, true
}

// procStat reads a process's parent, its own CPU seconds and its reaped
// children's.
func procStat(pid int) (ppid int, own, children float64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	tick := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v / clockTicks }
	return ppid, tick(14) + tick(15), tick(16) + tick(17), true
}
