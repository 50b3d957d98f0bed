package arms

import (
	"fmt"
	"strings"
)

// The spec a resume runs is the one the work was recorded with: the file the user gives,
// which must be that spec, else the text recorded in the database. A recorded text whose
// credentials were redacted cannot stand in for the file, since its secrets are gone.

// ResumeSpec is the spec to resume an experiment with: the file at path when given, else
// the text recorded for it at recordedPath. what names the experiment in the error.
func ResumeSpec(what, path, recordedPath, recorded string) (*Spec, error) {
	return resumeSpec(what, path, recordedPath, recorded, Load, Parse)
}

// ResumeBisectSpec is ResumeSpec for a bisection. A recorded text's server-info files
// are read beside its recorded path.
func ResumeBisectSpec(what, path, recordedPath, recorded string) (*BisectSpec, error) {
	return resumeSpec(what, path, recordedPath, recorded, LoadBisect, ParseBisect)
}

func resumeSpec[S any](what, path, recordedPath, recorded string, load func(string) (S, error), parse func(string, []byte) (S, error)) (S, error) {
	if path != "" {
		return load(path)
	}
	if strings.Contains(recorded, Redacted) {
		var none S
		return none, fmt.Errorf("%s: its recorded spec had credentials redacted; give the spec file with --spec", what)
	}
	return parse(recordedPath, []byte(recorded))
}
