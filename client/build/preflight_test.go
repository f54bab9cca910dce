package build

import (
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

const ref = taxonomy.ManagedBaseDockerRef

// good is the generated stanza's shape with a workdir.
func good(t *testing.T) string {
	t.Helper()
	df, err := Dockerfile(DockerfileOptions{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	return df
}

func TestPreflightTable(t *testing.T) {
	tail := "WORKDIR /w\nENTRYPOINT []\nCMD [\"/agentd\"]\n"
	cases := []struct {
		name    string
		df      string
		check   Check
		finding taxonomy.FindingID // "" with ok
		ok      bool
		// wrong is the edit to Preflight this row turns red.
		wrong string
	}{
		{name: "generated stanza", df: "", ok: true,
			wrong: "any check that refuses the project's own stanza"},
		{name: "lowercase keywords and continuation", df: "from " + ref + "\nworkdir \\\n  /w\nentrypoint []\ncmd [\"/agentd\"]\n", ok: true,
			wrong: "matching keywords case-sensitively or line by line instead of through the parser"},
		{name: "FROM from a default ARG", df: "ARG BASE=" + ref + "\nFROM ${BASE}\n" + tail, ok: true,
			wrong: "comparing the raw FROM text instead of the ARG-expanded reference"},
		{name: "multi-stage, final stage built FROM the first", df: "FROM " + ref + " AS base\nWORKDIR /w\nFROM golang AS tools\nRUN true\nFROM base\nENTRYPOINT []\nCMD [\"/agentd\"]\n", ok: true,
			wrong: "judging the last FROM text or dropping the WORKDIR inherited from the parent stage"},
		{name: "base declares a WORKDIR", df: "FROM my/base:1\nENTRYPOINT []\nCMD [\"/agentd\"]\n", check: Check{Base: Base{Image: "mine", DockerRef: "my/base:1", Workdir: "/srv"}}, ok: true,
			wrong: "requiring a WORKDIR line even when the base supplies one"},
		{name: "FROM another image", df: "FROM python:3.12-slim\n" + tail, finding: taxonomy.FindingBaseImageDockerRef,
			wrong: "deleting checkFrom, or comparing only the repository and not the tag"},
		{name: "FROM with near-miss tag", df: "FROM public.ecr.aws/amazonlinux/amazonlinux:2023\n" + tail, finding: taxonomy.FindingBaseImageDockerRef,
			wrong: "a prefix match on the reference"},
		{name: "FROM an ARG with no default", df: "ARG BASE\nFROM $BASE\n" + tail, finding: taxonomy.FindingBaseImageDockerRef,
			wrong: "treating an unexpanded variable as matching"},
		{name: "no FROM", df: "WORKDIR /w\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingBaseImageDockerRef,
			wrong: "leaving a FROM-less Dockerfile to the billable build"},
		{name: "final stage not rooted in the base", df: "FROM " + ref + " AS a\nFROM debian\n" + tail, finding: taxonomy.FindingBaseImageDockerRef,
			wrong: "checking the first FROM instead of the final stage's root"},
		{name: "no WORKDIR", df: "FROM " + ref + "\nENTRYPOINT []\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingBaseImagesLackWorkdir,
			wrong: "deleting checkWorkdir"},
		{name: "WORKDIR with no argument", df: "FROM " + ref + "\nWORKDIR\nENTRYPOINT []\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingBaseImagesLackWorkdir,
			wrong: "counting a bare WORKDIR keyword as a declaration"},
		{name: "WORKDIR only in an unrelated stage", df: "FROM golang AS b\nWORKDIR /src\nFROM " + ref + "\nENTRYPOINT []\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingBaseImagesLackWorkdir,
			wrong: "scanning every stage's instructions instead of the final image's lineage"},
		{name: "port disagrees", df: "FROM " + ref + "\nENV AGENTD_PORT=8080\n" + tail, finding: taxonomy.FindingAgentPortAgreement,
			wrong: "deleting checkPort"},
		{name: "port unset, client moved off 9000", df: "FROM " + ref + "\n" + tail, check: Check{Port: 8080}, finding: taxonomy.FindingAgentPortAgreement,
			wrong: "treating an unset AGENTD_PORT as agreeing with any port"},
		{name: "port unset, client on 9000", df: "FROM " + ref + "\n" + tail, ok: true,
			wrong: "refusing the unset variable when the default already agrees"},
		{name: "legacy ENV spelling, last one wins", df: "FROM " + ref + "\nENV AGENTD_PORT=9000\nENV AGENTD_PORT 8080\n" + tail, finding: taxonomy.FindingAgentPortAgreement,
			wrong: "reading only the key=value spelling, or the first assignment"},
		{name: "quoted port in a multi-pair ENV", df: "FROM " + ref + "\nENV A=1 AGENTD_PORT=\"8080\"\n" + tail, check: Check{Port: 8080}, ok: true,
			wrong: "comparing the quoted text instead of the value the builder sets"},
		{name: "port from a build argument", df: "FROM " + ref + "\nARG P\nENV AGENTD_PORT=$P\n" + tail, finding: taxonomy.FindingAgentPortAgreement,
			wrong: "passing a port that cannot be known until build time"},
		{name: "ENTRYPOINT swallows CMD", df: "FROM " + ref + "\nWORKDIR /w\nENTRYPOINT [\"/bin/sh\", \"-c\"]\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingDaemonIsTheCmd,
			wrong: "deleting the ENTRYPOINT check, or accepting any exec-form ENTRYPOINT"},
		{name: "shell-form ENTRYPOINT", df: "FROM " + ref + "\nWORKDIR /w\nENTRYPOINT /usr/bin/env\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingDaemonIsTheCmd,
			wrong: "checking only the JSON form"},
		{name: "an earlier ENTRYPOINT [] undone later", df: "FROM " + ref + "\nWORKDIR /w\nENTRYPOINT []\nENTRYPOINT [\"tini\"]\nCMD [\"/agentd\"]\n", finding: taxonomy.FindingDaemonIsTheCmd,
			wrong: "reading the first ENTRYPOINT instead of the last"},
		{name: "no CMD", df: "FROM " + ref + "\nWORKDIR /w\nENTRYPOINT []\n", finding: taxonomy.FindingDaemonIsTheCmd,
			wrong: "passing a Dockerfile that never starts agentd"},
		{name: "keepalive over the idle timeout", df: "FROM " + ref + "\nENV AGENTD_SSE_KEEPALIVE_SECS=90\n" + tail, finding: taxonomy.FindingKeepaliveUnderIdleTimeout,
			wrong: "deleting checkKeepalive"},
		{name: "keepalive equal to the idle timeout", df: "FROM " + ref + "\nENV AGENTD_SSE_KEEPALIVE_SECS=60\n" + tail, finding: taxonomy.FindingKeepaliveUnderIdleTimeout,
			wrong: "refusing only a keepalive strictly over the timeout (equality races)"},
		{name: "repair granted, image not marked a guest", df: "FROM " + ref + "\n" + tail, check: Check{RepairIdentity: true}, finding: taxonomy.FindingGuestNotDetectable,
			wrong: "deleting checkRepairIdentity, or reading an unset AGENTD_REPAIR_IDENTITY as on"},
		{name: "repair granted, image marked a guest", df: "FROM " + ref + "\nENV AGENTD_REPAIR_IDENTITY=Yes\n" + tail, check: Check{RepairIdentity: true}, ok: true,
			wrong: "accepting only the literal 1, where agentd takes yes/true/on in any case"},
		{name: "repair granted, the older spelling says off", df: "FROM " + ref + "\nENV AGENTD_REPAIR_IDENTITY=1 AGENTD_IDENTITY_REPAIR=0\n" + tail, check: Check{RepairIdentity: true}, finding: taxonomy.FindingGuestNotDetectable,
			wrong: "ignoring the older spelling, which agentd reads and lets win when it says off"},
		{name: "repair granted, marked from a build argument", df: "FROM " + ref + "\nARG R\nENV AGENTD_REPAIR_IDENTITY=$R\n" + tail, check: Check{RepairIdentity: true}, finding: taxonomy.FindingGuestNotDetectable,
			wrong: "passing a value that cannot be known until build time"},
		{name: "repair not granted, image unmarked", df: "FROM " + ref + "\n" + tail, ok: true,
			wrong: "requiring the mark of an image that asked for no repair"},
		{name: "keepalive changed, idle timeout follows", df: "FROM " + ref + "\nENV AGENTD_SSE_KEEPALIVE_SECS=90\n" + tail, check: Check{IdleTimeout: 4 * 90 * time.Second}, ok: true,
			wrong: "refusing a changed keepalive even when the client's idle timeout followed it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			df := tc.df
			if df == "" {
				df = good(t)
			}
			err := Preflight([]byte(df), tc.check)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused a good Dockerfile (guards against: %s): %v", tc.wrong, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted a bad Dockerfile (guards against: %s)", tc.wrong)
			}
			var ce *client.Error
			if !asError(err, &ce) || ce.Kind() != taxonomy.KindInvalidArg || ce.Finding() != tc.finding {
				t.Fatalf("want InvalidArg naming %q, got %v (finding %q)", tc.finding, err, findingOf(err))
			}
		})
	}
}

// The generated stanza keeps the invariants a caller's edits must keep; a
// wrong edit to Dockerfile (dropping ENTRYPOINT [], a hard-coded port, a FROM
// not derived from the base) turns this red.
func TestDockerfileStanza(t *testing.T) {
	df, err := Dockerfile(DockerfileOptions{Port: 8080, Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM " + ref + "\n", "WORKDIR /workspace\n", "ENV AGENTD_PORT=8080\n", "ENV AGENTD_REPAIR_IDENTITY=1\n", "EXPOSE 8080\n", "ENTRYPOINT []\n", "CMD [\"/agentd\"]\n"} {
		if !strings.Contains(df, want) {
			t.Errorf("stanza lacks %q:\n%s", want, df)
		}
	}
	if err := Preflight([]byte(df), Check{Port: 8080}); err != nil {
		t.Fatalf("the stanza fails its own preflight: %v", err)
	}
	noWD, _ := Dockerfile(DockerfileOptions{})
	if strings.Contains(noWD, "WORKDIR") {
		t.Fatalf("a WORKDIR appeared without being asked for:\n%s", noWD)
	}
	for _, bad := range []string{"relative", "/has space", "/q\"uote"} {
		if _, err := Dockerfile(DockerfileOptions{Workdir: bad}); err == nil {
			t.Errorf("workdir %q accepted", bad)
		}
	}
}
