package runtime

import (
	"archive/tar"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/moby/moby/client"
)

// ImageFile is one file of an image built from scratch.
type ImageFile struct {
	// Source is the file on this machine; symbolic links are followed.
	Source string
	// Path is where it lies in the image, absolute.
	Path string
}

// BuildImage builds an image FROM scratch that holds files, tags it tag and returns once
// the daemon has it. No registry is involved: the files travel in the build context.
// It is how a locally built engine (refserve) runs under the docker runtime. The
// image's entrypoint is entrypoint when given (the docker runtime sets its own from
// the command either way).
func (d Docker) BuildImage(ctx context.Context, tag string, files []ImageFile, entrypoint ...string) error {
	cli, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBuildContext(pw, files, entrypoint)) }()
	// No arbiter labels on the image: containers inherit them, and gc would then take
	// containers that someone else started from it for arbiter's.
	res, err := cli.ImageBuild(ctx, pr, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("docker runtime: build %s: %w", tag, err)
	}
	defer res.Body.Close()
	// The build reports its failure inside the stream, after a 200.
	dec := json.NewDecoder(res.Body)
	var out strings.Builder
	for {
		var msg struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("docker runtime: build %s: reading the daemon's answer: %w", tag, err)
		}
		if msg.Error != "" {
			return fmt.Errorf("docker runtime: build %s: %s\n%s", tag, msg.Error, out.String())
		}
		out.WriteString(msg.Stream)
	}
}

// RemoveImage removes tag from the daemon.
func (d Docker) RemoveImage(ctx context.Context, tag string) error {
	cli, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
		return fmt.Errorf("docker runtime: remove image %s: %w", tag, err)
	}
	return nil
}

// writeBuildContext writes a tar holding a Dockerfile that copies rootfs/ into an empty
// image, and the files under rootfs/.
func writeBuildContext(w io.Writer, files []ImageFile, entrypoint []string) error {
	tw := tar.NewWriter(w)
	dockerfile := "FROM scratch\nCOPY rootfs/ /\n"
	if len(entrypoint) > 0 {
		// The exec form is a JSON list.
		b, err := json.Marshal(entrypoint)
		if err != nil {
			return err
		}
		dockerfile += "ENTRYPOINT " + string(b) + "\n"
	}
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("image file %s: path %q is not absolute", f.Source, f.Path)
		}
		if err := addFile(tw, f); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, f ImageFile) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("image file: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return fmt.Errorf("image file: %w", err)
	}
	hdr := &tar.Header{Name: "rootfs" + path.Clean(f.Path), Mode: int64(fi.Mode().Perm()), Size: fi.Size(),
		ModTime: fi.ModTime()}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("image file %s: %w", f.Source, err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("image file %s: %w", f.Source, err)
	}
	return nil
}

// ExecutableFiles lists what an executable needs in an image from scratch: itself at
// path, and, when it is dynamically linked (a Go binary that loads GPU libraries
// through purego is, even without cgo), its program loader and the shared libraries it
// needs, taken from this machine at the places the loader looks for them.
func ExecutableFiles(binary, path string) ([]ImageFile, error) {
	files := []ImageFile{{Source: binary, Path: path}}
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("executable %s: %w", binary, err)
	}
	defer f.Close()
	interp, err := interpreter(f)
	if err != nil {
		return nil, fmt.Errorf("executable %s: %w", binary, err)
	}
	if interp == "" {
		return files, nil
	}
	files = append(files, ImageFile{Source: interp, Path: interp})
	seen := map[string]bool{}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("executable %s: %w", binary, err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		lib, err := findLibrary(name)
		if err != nil {
			return nil, fmt.Errorf("executable %s: %w", binary, err)
		}
		if lib != interp {
			files = append(files, ImageFile{Source: lib, Path: lib})
		}
		more, err := importedLibraries(lib)
		if err != nil {
			return nil, fmt.Errorf("executable %s: %w", binary, err)
		}
		queue = append(queue, more...)
	}
	return files, nil
}

func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("program interpreter: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

func importedLibraries(lib string) ([]string, error) {
	f, err := elf.Open(lib)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ImportedLibraries()
}

// libraryDirs are the loader's default directories (an image from scratch has no
// ld.so.cache), multiarch ones first as on Debian and Ubuntu.
func libraryDirs() []string {
	arch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[goruntime.GOARCH]
	var dirs []string
	if arch != "" {
		dirs = append(dirs, "/lib/"+arch, "/usr/lib/"+arch)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

func findLibrary(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, dir := range libraryDirs() {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s: not found in %s", name, strings.Join(libraryDirs(), ", "))
}
