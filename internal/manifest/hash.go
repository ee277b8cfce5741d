package manifest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
)

// The sampled hash reads the first, middle and last EdgeBlock bytes of a
// file and Blocks evenly spaced blocks of Block bytes: at most 4 MiB of any
// file, however large. A file no larger than what the samples cover is
// hashed whole.
const (
	EdgeBlock = 1 << 20
	Block     = 64 << 10
	Blocks    = 16
)

// SampledHashScheme names the sampled hash in the manifest.
const SampledHashScheme = "sampled-v1: sha256 of the size (8 bytes, little-endian), then of each sampled range in order " +
	"(offset and length, 8 bytes each, then its bytes): the first, middle and last 1 MiB and 16 evenly spaced 64 KiB blocks, " +
	"overlaps merged"

// Range is one sampled part of a file.
type Range struct{ Off, Len int64 }

// SampleRanges returns the ranges a sampled hash of a file of size bytes
// reads: sorted, merged where they overlap or touch, within [0, size).
func SampleRanges(size int64) []Range {
	if size <= 0 {
		return nil
	}
	var rs []Range
	add := func(off, n int64) {
		off = max(off, 0)
		end := min(off+n, size)
		if end > off {
			rs = append(rs, Range{off, end - off})
		}
	}
	add(0, EdgeBlock)
	add(size/2-EdgeBlock/2, EdgeBlock)
	add(size-EdgeBlock, EdgeBlock)
	if size > Block {
		for i := int64(0); i < Blocks; i++ {
			add(i*(size-Block)/(Blocks-1), Block)
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].Off < rs[b].Off })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Off <= last.Off+last.Len {
			last.Len = max(last.Len, r.Off+r.Len-last.Off)
			continue
		}
		out = append(out, r)
	}
	return out
}

// SampledSHA256 hashes a content of size bytes by SampledHashScheme.
func SampledSHA256(r io.ReaderAt, size int64) (string, error) {
	h := sha256.New()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(size))
	h.Write(hdr[:])
	for _, rg := range SampleRanges(size) {
		binary.LittleEndian.PutUint64(hdr[:], uint64(rg.Off))
		h.Write(hdr[:])
		binary.LittleEndian.PutUint64(hdr[:], uint64(rg.Len))
		h.Write(hdr[:])
		n, err := io.Copy(h, io.NewSectionReader(r, rg.Off, rg.Len))
		if err != nil {
			return "", err
		}
		if n != rg.Len {
			return "", fmt.Errorf("read %d of %d bytes at offset %d: the file shrank while it was hashed", n, rg.Len, rg.Off)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SampledFileSHA256 is the sampled hash of a file, with its size.
func SampledFileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", fi.Size(), errNotRegular
	}
	sum, err := SampledSHA256(f, fi.Size())
	return sum, fi.Size(), err
}

// fileSHA256 is the sha256 of a whole file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fullHashLimit is the size up to which a dataset file is hashed whole.
const fullHashLimit = 1 << 30

// DatasetOf describes a dataset for Options.Dataset: for a file, its hash
// (whole up to 1 GiB, sampled above); params are what else shapes the
// prompts. An unreadable file is an error; the Dataset is still returned.
func DatasetOf(name, path string, seed uint64, params map[string]string) (*Dataset, error) {
	d := &Dataset{Name: name, Path: path, Seed: seed, Params: params}
	if path == "" {
		return d, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return d, fmt.Errorf("hashing the dataset: %w", err)
	}
	if fi.Size() <= fullHashLimit {
		d.SHA256, err = fileSHA256(path)
	} else {
		d.SampledSHA256, _, err = SampledFileSHA256(path)
	}
	if err != nil {
		return d, fmt.Errorf("hashing the dataset %s: %w", path, err)
	}
	return d, nil
}
