package main

import (
	"encoding/hex"
	"fmt"
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
	fs := newFlags(e, "id decode", "ID...", "Decodes each ID and prints its parts.")
	kind := fs.String("layout", "twitter", "what the IDs are: "+fmt.Sprintf(kindHelp, layoutNames()))
	width := fs.Int("serial-width", 32, "serial: total digits")
	wdigits := fs.Int("serial-worker-digits", 4, "serial: worker digits")
	ids, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("no ID to decode")
	}
	for i, s := range ids {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		if err := decodeOne(e, *kind, s, idgen.SerialFormat{Width: *width, WorkerDigits: *wdigits}); err != nil {
			return err
		}
	}
	return nil
}

func decodeOne(e *env, kind, s string, sf idgen.SerialFormat) error {
	w := e.out
	switch kind {
	case "objectid":
		id, err := idgen.ParseObjectID(s)
		if err != nil {
			return usagef("%v", err)
		}
		p := id.Process()
		fmt.Fprintf(w, "objectid:  %s\ntime:      %s\nprocess:   %s\ncounter:   %d\n",
			id, id.Time().UTC().Format(time.RFC3339), hex.EncodeToString(p[:]), id.Counter())
	case "serial":
		p, err := sf.Parse(s)
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintf(w, "serial:    %s\ntime:      %s\nworker:    %d\nsequence:  %d\n",
			s, p.Time.Format("2006-01-02T15:04:05.000Z07:00"), p.Worker, p.Sequence)
	case "uuid":
		u, err := idgen.ParseUUID(s)
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintf(w, "uuid:      %s\nversion:   %d\n", u, u[6]>>4)
		if u[6]>>4 == 7 {
			ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
			fmt.Fprintf(w, "time:      %s\n", time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		}
	default:
		l, ok := layoutByName(kind)
		if !ok {
			return usagef("unknown --layout %q: want "+kindHelp, kind, layoutNames())
		}
		v, err := parseInt64ID(s)
		if err != nil {
			return usagef("%v", err)
		}
		p := l.Decompose(v)
		fmt.Fprintf(w, "id:        %d\nlayout:    %s\ntime:      %s\n", v, l.Name, p.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		if l.DatacenterBits > 0 {
			fmt.Fprintf(w, "worker:    %d (datacenter %d, machine %d)\n", p.Worker, p.Datacenter, p.Machine)
		} else {
			fmt.Fprintf(w, "worker:    %d\n", p.Worker)
		}
		fmt.Fprintf(w, "sequence:  %d\n", p.Sequence)
		if back, err := l.Compose(p); err != nil || back != v {
			fmt.Fprintf(w, "warning:   %d is not an ID this layout issues\n", v)
		}
	}
	return nil
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
