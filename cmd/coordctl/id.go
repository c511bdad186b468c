package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

func init() {
	register(command{name: "id decode", summary: "decode Snowflake IDs, ObjectIds, serials and UUIDs", run: idDecode})
	register(command{name: "id next", summary: "mint IDs locally (no server)", run: idNext})
}

// kinds of ID that are not Snowflake layouts.
const kindHelp = "a Snowflake layout (%s), or objectid, serial, uuid"

func layoutNames() string {
	var n []string
	for _, l := range idgen.Presets() {
		n = append(n, l.Name)
	}
	return strings.Join(n, ", ")
}

func layoutByName(name string) (idgen.Layout, bool) {
	for _, l := range idgen.Presets() {
		if l.Name == name {
			return l, true
		}
	}
	return idgen.Layout{}, false
}

func idDecode(e *env, args []string) error {
	fs := newFlags(e, "id decode", "ID...", "Decodes each ID and prints its parts. A time before the layout's epoch or\n"+
		"more than a day ahead of the clock is reported on stderr: the layout is likely wrong.")
	kind := fs.String("layout", "twitter", "what the IDs are: "+fmt.Sprintf(kindHelp, layoutNames()))
	width := fs.Int("serial-width", 32, "serial: total digits")
	wdigits := fs.Int("serial-worker-digits", 4, "serial: worker digits")
	asJSON := addJSON(fs)
	ids, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("no ID to decode")
	}
	var all []decoded
	for _, s := range ids {
		d, err := decodeID(*kind, s, idgen.SerialFormat{Width: *width, WorkerDigits: *wdigits}, e.now())
		if err != nil {
			return err
		}
		for _, w := range d.Warnings {
			if !d.notIssued || w != d.Warnings[0] {
				fmt.Fprintf(e.errOut, "coordctl id decode: warning: %s\n", w)
			}
		}
		all = append(all, d)
	}
	if *asJSON {
		return writeJSON(e.out, all)
	}
	for i, d := range all {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		d.print(e.out)
	}
	return nil
}

// decoded is one ID taken apart, for text, JSON and the operator page.
// Fields that do not apply to the ID's kind are nil or empty.
type decoded struct {
	ID         string   `json:"id"` // as given: IDs above 2^53 travel as strings
	Kind       string   `json:"kind"`
	Layout     string   `json:"layout,omitempty"`
	Time       string   `json:"time,omitempty"` // RFC 3339, UTC, milliseconds
	UnixMs     *int64   `json:"unix_ms,omitempty"`
	Worker     *int64   `json:"worker,omitempty"`
	Datacenter *int64   `json:"datacenter,omitempty"`
	Machine    *int64   `json:"machine,omitempty"`
	Sequence   *int64   `json:"sequence,omitempty"`
	Process    string   `json:"process,omitempty"`
	Counter    *int64   `json:"counter,omitempty"`
	Version    int      `json:"version,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`

	t         time.Time
	split     bool // the layout splits the worker into datacenter and machine
	notIssued bool // Warnings[0] says the layout does not issue this ID (printed on stdout)
}

const msTime = "2006-01-02T15:04:05.000Z07:00"

func ptr(v int64) *int64 { return &v }

func (d *decoded) setTime(t time.Time) {
	d.t = t.UTC()
	d.Time = d.t.Format(msTime)
	d.UnixMs = ptr(t.UnixMilli())
}

// print writes d in coordctl's text format.
func (d *decoded) print(w io.Writer) {
	switch d.Kind {
	case "objectid":
		fmt.Fprintf(w, "objectid:  %s\ntime:      %s\nprocess:   %s\ncounter:   %d\n",
			d.ID, d.t.Format(time.RFC3339), d.Process, *d.Counter)
	case "serial":
		fmt.Fprintf(w, "serial:    %s\ntime:      %s\nworker:    %d\nsequence:  %d\n", d.ID, d.Time, *d.Worker, *d.Sequence)
	case "uuid":
		fmt.Fprintf(w, "uuid:      %s\nversion:   %d\n", d.ID, d.Version)
		if d.Time != "" {
			fmt.Fprintf(w, "time:      %s\n", d.Time)
		}
	default:
		fmt.Fprintf(w, "id:        %s\nlayout:    %s\ntime:      %s\n", d.ID, d.Layout, d.Time)
		if d.split {
			fmt.Fprintf(w, "worker:    %d (datacenter %d, machine %d)\n", *d.Worker, *d.Datacenter, *d.Machine)
		} else {
			fmt.Fprintf(w, "worker:    %d\n", *d.Worker)
		}
		fmt.Fprintf(w, "sequence:  %d\n", *d.Sequence)
		if d.notIssued {
			fmt.Fprintf(w, "warning:   %s\n", d.Warnings[0])
		}
	}
}

// unixFloor is the earliest plausible time of an ID whose clock counts from
// the Unix epoch (ObjectId, UUIDv7, serials): none was made before 2000.
var unixFloor = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// checkTime adds a warning when d's time is before floor or more than a day
// ahead of now: the ID was read with the wrong layout, or is not an ID.
func (d *decoded) checkTime(floor, now time.Time) {
	switch {
	case d.t.Before(floor):
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s decodes to %s, before %s: is the layout right?",
			d.ID, d.Time, floor.UTC().Format(msTime)))
	case d.t.After(now.Add(24 * time.Hour)):
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s decodes to %s, %s ahead of the clock: is the layout right?",
			d.ID, d.Time, roughly(d.t.Sub(now))))
	}
}

// roughly formats a long duration in years, days or hours.
func roughly(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= 2*365*day:
		return fmt.Sprintf("%d years", d/(365*day))
	case d >= 2*day:
		return fmt.Sprintf("%d days", d/day)
	default:
		return fmt.Sprintf("%d hours", d/time.Hour)
	}
}

// decodeID decodes s as kind (a layout name, objectid, serial or uuid). A
// malformed ID or unknown kind is a usage error.
func decodeID(kind, s string, sf idgen.SerialFormat, now time.Time) (decoded, error) {
	d := decoded{ID: s, Kind: kind}
	switch kind {
	case "objectid":
		id, err := idgen.ParseObjectID(s)
		if err != nil {
			return d, usagef("%v", err)
		}
		p := id.Process()
		d.ID, d.Process, d.Counter = id.String(), hex.EncodeToString(p[:]), ptr(int64(id.Counter()))
		d.setTime(id.Time())
		d.checkTime(unixFloor, now)
	case "serial":
		p, err := sf.Parse(s)
		if err != nil {
			return d, usagef("%v", err)
		}
		d.Worker, d.Sequence = ptr(p.Worker), ptr(p.Sequence)
		d.setTime(p.Time)
		d.checkTime(unixFloor, now)
	case "uuid":
		u, err := idgen.ParseUUID(s)
		if err != nil {
			return d, usagef("%v", err)
		}
		d.ID, d.Version = u.String(), int(u[6]>>4)
		if d.Version == 7 {
			ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
			d.setTime(time.UnixMilli(ms))
			d.checkTime(unixFloor, now)
		}
	default:
		l, ok := layoutByName(kind)
		if !ok {
			return d, usagef("unknown --layout %q: want "+kindHelp, kind, layoutNames())
		}
		v, err := parseInt64ID(s)
		if err != nil {
			return d, usagef("%v", err)
		}
		p := l.Decompose(v)
		d.ID, d.Kind, d.Layout = strconv.FormatInt(v, 10), "snowflake", l.Name
		d.setTime(p.Time)
		d.Worker, d.Sequence = ptr(p.Worker), ptr(p.Sequence)
		if l.DatacenterBits > 0 {
			d.split, d.Datacenter, d.Machine = true, ptr(p.Datacenter), ptr(p.Machine)
		}
		if back, err := l.Compose(p); err != nil || back != v {
			d.notIssued = true
			d.Warnings = append(d.Warnings, fmt.Sprintf("%d is not an ID this layout issues", v))
		}
		d.checkTime(l.Epoch, now)
	}
	return d, nil
}

// parseInt64ID reads a decimal, base32 (13 chars) or base58 (11 chars) ID.
func parseInt64ID(s string) (int64, error) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v < 0 {
			return 0, fmt.Errorf("ID %q is negative", s)
		}
		return v, nil
	}
	if len(s) == idgen.Base32Len {
		if v, err := idgen.DecodeBase32(s); err == nil {
			return v, nil
		}
	}
	if len(s) == idgen.Base58Len {
		if v, err := idgen.DecodeBase58(s); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("ID %q is not a decimal, base32 or base58 int64", s)
}

func idNext(e *env, args []string) error {
	fs := newFlags(e, "id next", "", "Mints IDs in this process: no server, no lease. Use a leased worker ID (see workers list) for IDs other processes also mint.")
	kind := fs.String("kind", "snowflake", "snowflake, objectid, uuid4, uuid7 or serial")
	layoutName := fs.String("layout", "twitter", "Snowflake layout: "+layoutNames())
	worker := fs.Int64("worker", 0, "worker ID (snowflake, serial)")
	n := fs.Int("n", 1, "how many IDs, 1 to 100000")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *n < 1 || *n > 100000 {
		return usagef("-n %d outside [1, 100000]", *n)
	}
	var next func() (string, error)
	switch *kind {
	case "snowflake":
		l, ok := layoutByName(*layoutName)
		if !ok {
			return usagef("unknown --layout %q: want one of %s", *layoutName, layoutNames())
		}
		sf, err := idgen.NewSnowflake(l, *worker)
		if err != nil {
			return usagef("%v", err)
		}
		next = func() (string, error) {
			id, err := sf.Next()
			return strconv.FormatInt(id, 10), err
		}
	case "objectid":
		g, err := idgen.NewObjectIDGenerator()
		if err != nil {
			return err
		}
		next = func() (string, error) { return g.New().String(), nil }
	case "uuid4":
		next = func() (string, error) { u, err := idgen.NewUUIDv4(); return u.String(), err }
	case "uuid7":
		next = func() (string, error) { u, err := idgen.NewUUIDv7(); return u.String(), err }
	case "serial":
		s, err := idgen.NewSerial(idgen.SerialFormat{}, *worker)
		if err != nil {
			return usagef("%v", err)
		}
		next = s.Next
	default:
		return usagef("unknown --kind %q: want snowflake, objectid, uuid4, uuid7 or serial", *kind)
	}
	for range *n {
		s, err := next()
		if err != nil {
			return err
		}
		fmt.Fprintln(e.out, s)
	}
	return nil
}
