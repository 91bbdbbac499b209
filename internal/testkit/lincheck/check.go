package lincheck

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Check checks history against Model within timeout. Unless the history is
// linearizable (porcupine.Ok), it writes porcupine's HTML visualisation of
// the history and its longest linearizable prefixes to vizPath, and
// returns an error that names the file. porcupine.Unknown means the checker
// ran out of time.
func Check(history []porcupine.Operation, timeout time.Duration, vizPath string) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	if err := porcupine.VisualizePath(Model, info, vizPath); err != nil {
		return res, fmt.Errorf("history is %s; writing its visualisation: %w", res, err)
	}
	return res, fmt.Errorf("history is %s; visualisation in %s", res, vizPath)
}
