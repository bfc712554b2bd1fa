package config

import "time"

// ParseWindow parses a command's --since and --until (ParseTime), either
// of which may be empty; both given, since must be before until. Its
// errors are *Error naming the flag.
func ParseWindow(sinceFlag, untilFlag string) (since, until time.Time, err error) {
	if sinceFlag != "" {
		if since, err = ParseTime(sinceFlag); err != nil {
			return since, until, &Error{Key: "--since", Msg: err.Error()}
		}
	}
	if untilFlag != "" {
		if until, err = ParseTime(untilFlag); err != nil {
			return since, until, &Error{Key: "--until", Msg: err.Error()}
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, &Error{Key: "--since", Msg: Quote(sinceFlag) + " must be before --until " + Quote(untilFlag), Hint: "swap them, or widen the window"}
	}
	return since, until, nil
}
