package main

import (
	"errors"
	"strconv"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The kept MicroVMs (`run --keep`) are remembered by client/kept under the
// state directory, so every attached and lifecycle command reaches one by
// --microvm-id (or MICROVM_ID) alone. Explicit flags and variables win over
// what is remembered; a remembered value only fills what nothing else set.

// remember records a kept MicroVM; a failure is a warning, since the run
// already reported everything needed to attach.
func (a *app) remember(dir string, m kept.MicroVM) {
	if err := kept.Save(dir, m); err != nil {
		a.Warn("%s is not remembered, so attach with --endpoint and --agent-token: %v", m.ID, err)
	}
}

// forget drops a terminated MicroVM's record.
func (a *app) forget(dir, id string) {
	if err := kept.Forget(dir, id); err != nil {
		a.Warn("the kept record of %s was not removed: %v", id, err)
	}
}

// fillFromKept completes the addressing flags from the record of
// --microvm-id, when the endpoint or the token is missing. found is false
// when there is no record; err is a record that exists but cannot be used.
func (f *AttachFlags) fillFromKept(a *app) (found bool, err error) {
	if f.MicrovmID == "" || f.Direct || (f.Endpoint != "" && f.AgentToken != "") {
		return false, nil
	}
	dir, err := ledgerDir(a, f.StateDir)
	if err != nil {
		return false, err
	}
	m, err := kept.Load(dir, f.MicrovmID)
	if errors.Is(err, kept.ErrNotKept) {
		return false, nil
	}
	if err != nil {
		return false, client.Errorf(taxonomy.KindPrecondition, "", "%v", err)
	}
	if f.Endpoint == "" {
		f.Endpoint = m.Endpoint
	}
	if f.AgentToken == "" {
		f.AgentToken = m.AgentToken
	}
	if m.Port != 0 && f.Port == taxonomy.DefaultAgentPort && a.Env("MICROVM_PORT") == "" {
		f.Port = m.Port
	}
	fillControl(&f.ControlEndpoint, &f.RegionFlags, m, a.Env)
	return true, nil
}

// fillControl points a command at the control plane a kept MicroVM was
// launched through, unless a flag or variable names one.
func fillControl(endpoint *string, r *RegionFlags, m kept.MicroVM, getenv func(string) string) {
	if cplane.ConfiguredEndpoint(*endpoint, getenv) == "" {
		*endpoint = m.ControlEndpoint
	}
	if _, given, _ := r.flagRegion(); given || m.Region == "" {
		return
	}
	for _, name := range planes.RegionEnv {
		if getenv(name) != "" {
			return
		}
	}
	if _, err := client.ParseRegion(m.Region); err == nil {
		region := m.Region
		r.Region = &region
	} else {
		r.UnlistedRegion = m.Region
	}
}

// forKept points a lifecycle command at the control plane id was launched
// through when it is a kept MicroVM and nothing else names one.
func (f *LifecycleFlags) forKept(a *app, stateDir, id string) {
	if f.Local {
		return
	}
	dir, err := ledgerDir(a, stateDir)
	if err != nil {
		return
	}
	if m, err := kept.Load(dir, id); err == nil {
		fillControl(&f.ControlEndpoint, &f.RegionFlags, m, a.Env)
	}
}

// notKeptHint says where the missing values could have come from.
func notKeptHint(a *app, f *AttachFlags) string {
	if f.MicrovmID == "" || f.Direct {
		return ""
	}
	dir, _ := ledgerDir(a, f.StateDir)
	return "; no kept MicroVM " + strconv.Quote(f.MicrovmID) + " is remembered under " + kept.Dir(dir) + " (only `microvm run --keep` by this user remembers one)"
}
