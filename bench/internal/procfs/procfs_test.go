package procfs

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ProcStat
		wantErr bool
	}{
		{
			name: "plain",
			in:   "4242 (haproxy) S 1 4242 4242 0 -1 4194560 1200 0 0 0 1234 567 0 0 20 0 1 0 100 10000000 2000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 0 0 0 0 0 0\n",
			want: ProcStat{PID: 4242, Comm: "haproxy", PPID: 1, UTime: 1234, STime: 567},
		},
		{
			// The command name may hold spaces and ')' (proc(5)).
			name: "comm with parens and spaces",
			in:   "77 (nginx: worker) (x)) R 76 76 76 0 -1 0 0 0 0 0 15 3 0 0 20 0 1 0 1 1 1",
			want: ProcStat{PID: 77, Comm: "nginx: worker) (x)", PPID: 76, UTime: 15, STime: 3},
		},
		{name: "no comm", in: "12 S 1 2 3", wantErr: true},
		{name: "too short", in: "12 (x) S 1 2 3", wantErr: true},
		{name: "bad utime", in: "12 (x) S 1 1 1 0 -1 0 0 0 0 0 u 3 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseProcStat error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseProcStat = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got, want := (ProcStat{UTime: 150, STime: 50}).CPU(), 2*time.Second; got != want {
		t.Errorf("CPU() = %v, want %v", got, want)
	}
}

func TestParseRSS(t *testing.T) {
	status := "Name:\tnginx\nVmPeak:\t  20000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n"
	got, err := ParseRSS([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(12345); got != want {
		t.Errorf("ParseRSS = %d, want %d", got, want)
	}
	for _, bad := range []string{"Name: x\n", "VmRSS: 12 MB\n", "VmRSS: x kB\n"} {
		if _, err := ParseRSS([]byte(bad)); err == nil {
			t.Errorf("ParseRSS(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseMem(t *testing.T) {
	status := "Name:\tedge\nVmRSS:\t   45216 kB\nRssAnon:\t   28196 kB\nRssFile:\t   17020 kB\nRssShmem:\t 0 kB\n"
	got, err := ParseStatusMem([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Mem{RSS: 45216, Anon: 28196, File: 17020}); got != want {
		t.Errorf("ParseStatusMem = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"VmRSS: 1 kB\nRssAnon: 1 kB\n", "VmRSS: 1 kB\nRssAnon: 1 kB\nRssFile: 1 MB\n"} {
		if _, err := ParseStatusMem([]byte(bad)); err == nil {
			t.Errorf("ParseStatusMem(%q) succeeded, want an error", bad)
		}
	}
	rollup := "00400000-7ffd rw-p 00000000 00:00 0  [rollup]\nRss:   45216 kB\nPss:   30001 kB\nPss_Anon: 28196 kB\n"
	if pss, err := ParsePss([]byte(rollup)); err != nil || pss != 30001 {
		t.Errorf("ParsePss = %d, %v, want 30001", pss, err)
	}
	if _, err := ParsePss([]byte("Rss: 1 kB\n")); err == nil {
		t.Error("ParsePss without a Pss line succeeded, want an error")
	}
}

// TestReadMemSelf: this process's figures are all read. They are not
// compared: status and smaps_rollup are read apart, and the kernel batches
// the counters behind status (proc(5): "inaccurate").
func TestReadMemSelf(t *testing.T) {
	m, err := ReadMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Anon <= 0 || m.File <= 0 || m.Pss <= 0 {
		t.Errorf("ReadMem(self) = %+v: want every figure above 0", m)
	}
}

func TestParseCPUStat(t *testing.T) {
	in := `cpu  300 0 100 1000 10 0 5 0 0 0
cpu0 200 0 50 400 5 0 5 0 0 0
cpu1 100 0 50 600 5 0 0 0 0 0
intr 1 2 3
ctxt 99
`
	got, err := ParseCPUStat([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]CPUTimes{0: {Busy: 255, Total: 660}, 1: {Busy: 150, Total: 755}}
	if len(got) != len(want) {
		t.Fatalf("ParseCPUStat returned %d cores, want %d", len(got), len(want))
	}
	for core, w := range want {
		if got[core] != w {
			t.Errorf("core %d = %+v, want %+v", core, got[core], w)
		}
	}
	if _, err := ParseCPUStat([]byte("intr 1\n")); err == nil {
		t.Error("ParseCPUStat without cores succeeded, want an error")
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		name          string
		before, after CPUTimes
		want          float64
	}{
		{"half", CPUTimes{Busy: 100, Total: 200}, CPUTimes{Busy: 150, Total: 300}, 0.5},
		{"no time passed", CPUTimes{Busy: 1, Total: 2}, CPUTimes{Busy: 1, Total: 2}, 0},
		{"saturated", CPUTimes{Busy: 0, Total: 0}, CPUTimes{Busy: 100, Total: 100}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Utilization(tt.before, tt.after); got != tt.want {
				t.Errorf("Utilization = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseCPUModel(t *testing.T) {
	cpuinfo := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: other\n"
	if got, want := ParseCPUModel([]byte(cpuinfo)), "Intel(R) Xeon(R) CPU @ 2.20GHz"; got != want {
		t.Errorf("ParseCPUModel = %q, want %q", got, want)
	}
	// "model" alone is not the model name.
	if got := ParseCPUModel([]byte("processor\t: 0\nmodel\t\t: 85\n")); got != "" {
		t.Errorf("ParseCPUModel without a model name = %q, want \"\"", got)
	}
}

// TestSelf reads this test process's own figures, which exist on any Linux.
func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	s, err := ReadProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.PID, pid; got != want {
		t.Errorf("PID = %d, want %d", got, want)
	}
	if rss, err := ReadRSS(pid); err != nil || rss <= 0 {
		t.Errorf("ReadRSS = %d, %v; want a positive size", rss, err)
	}
	if tree := Tree(pid); len(tree) == 0 || tree[0] != pid {
		t.Errorf("Tree(%d) = %v, want it to start with the pid", pid, tree)
	}
	if n, err := CountFDs(pid); err != nil || n < 3 {
		t.Errorf("CountFDs = %d, %v; want at least stdin/out/err", n, err)
	}
	m := ReadMachine()
	if m.NProc < 1 || m.NProc != OnlineCPUs() || m.Kernel == "" || m.MemoryKB <= 0 || m.FDLimit == "" {
		t.Errorf("ReadMachine = %+v, want cores, kernel, memory and fd limit", m)
	}
}
