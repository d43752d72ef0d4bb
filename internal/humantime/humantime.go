// Package humantime writes durations as people do, for the texts core and core/policy
// write about a configuration.
package humantime

import (
	"strconv"
	"time"
)

// Duration writes d as people do: 24h, 30m, 90s, 2s, 500ms.
func Duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d >= 10*time.Minute:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
