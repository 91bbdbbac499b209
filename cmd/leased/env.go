package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// envPrefix begins the environment variable of every flag of the server.
const envPrefix = "LEASED_"

// envListSep separates the items of a repeatable flag in its environment
// variable: LEASED_TLS_HOST=a.example.com,10.0.0.1.
const envListSep = ","

// envHelp documents the environment variables in leased --help.
const envHelp = `Every flag of the server can also come from the environment, as
` + envPrefix + `<FLAG>: the flag's name in upper case, dashes as underscores
(--lease-term is ` + envPrefix + `LEASE_TERM, --listen is ` + envPrefix + `LISTEN; each flag
below names its variable). A flag on the command line wins over its
variable, and an empty variable counts as unset. A repeatable flag (--term,
--tls-host, --peer-route) takes its values separated by commas, such as
` + envPrefix + `TERM=/hot/=1s,/cold/=1m. A bad value is a bad command line that names
the variable. The start-up log names the variables used and warns of
` + envPrefix + ` variables that match no flag. The subcommands (cert, inspect,
restore, snapshot) read only their command line.`

// envName returns the environment variable of the flag named name:
// LEASED_ and the name in upper case, with dashes as underscores.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// noteEnvInUsage adds to the usage of each flag of fs that may come from
// the environment the name of its variable, for --help.
func noteEnvInUsage(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if fromEnvAllowed(f) {
			f.Usage += " [$" + envName(f.Name) + "]"
		}
	})
}

// fromEnvAllowed reports whether f may come from the environment: not
// --help nor --version, and not a hidden flag, which is for tests only and
// must be given on the command line where it shows.
func fromEnvAllowed(f *pflag.Flag) bool {
	return f.Name != "help" && f.Name != "version" && !f.Hidden
}

// envFlags is what applyEnv took from the environment.
type envFlags struct {
	used    map[string]string // flag name → its variable, for flags set from it
	unknown []string          // LEASED_ variables that name no flag, sorted
}

// applyEnv sets every flag of fs that the command line left unset (and
// that fromEnvAllowed) from its environment variable in environ, a list of
// KEY=VALUE as os.Environ returns. It must be called after the command
// line is parsed. A repeatable flag (a pflag.SliceValue) takes the
// comma-separated items of its variable, with spaces around them and empty
// items dropped. A value the flag refuses is a usage error naming the
// variable.
func applyEnv(fs *pflag.FlagSet, environ []string) (envFlags, error) {
	vars := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, envPrefix) {
			vars[k] = v
		}
	}
	ef := envFlags{used: make(map[string]string)}
	known := make(map[string]bool)
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		name := envName(f.Name)
		known[name] = true
		v, ok := vars[name]
		if err != nil || !ok || v == "" || f.Changed || !fromEnvAllowed(f) {
			return
		}
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			var items []string
			for _, item := range strings.Split(v, envListSep) {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			err = sv.Replace(items)
		} else {
			err = f.Value.Set(v)
		}
		if err != nil {
			err = usagef("environment variable %s=%q: invalid value for --%s: %v", name, v, f.Name, err)
			return
		}
		ef.used[f.Name] = name
	})
	if err != nil {
		return envFlags{}, err
	}
	for k := range vars {
		if !known[k] {
			ef.unknown = append(ef.unknown, k)
		}
	}
	slices.Sort(ef.unknown)
	return ef, nil
}

// names returns the variables used, sorted.
func (ef envFlags) names() []string {
	var ns []string
	for _, n := range ef.used {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// explain adds to a usage error that names flags set from the
// environment which variables they came from, so that the operator knows
// where to look: "--cacert is for a node of a cluster ... (--cacert came
// from $LEASED_CACERT)". Other errors are returned as they are.
func (ef envFlags) explain(err error) error {
	var ue usageError
	if err == nil || len(ef.used) == 0 || !errors.As(err, &ue) {
		return err
	}
	var notes []string
	for flag, name := range ef.used {
		if mentions(err.Error(), flag) {
			notes = append(notes, fmt.Sprintf("--%s came from $%s", flag, name))
		}
	}
	if len(notes) == 0 {
		return err
	}
	slices.Sort(notes)
	return usageError{fmt.Errorf("%w (%s)", ue.err, strings.Join(notes, "; "))}
}

// mentions reports whether msg names the flag --flag as a whole word.
func mentions(msg, flag string) bool {
	re := regexp.MustCompile(`(^|[^\w-])--` + regexp.QuoteMeta(flag) + `($|[^\w-])`)
	return re.MatchString(msg)
}
