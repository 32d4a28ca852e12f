package tokenizer

// byteToRune is GPT-2's byte-to-unicode table: printable bytes map to themselves, the others to
// code points from U+0100 on, so every byte has a visible stand-in in vocab strings.
func byteToRune() [256]rune {
	var t [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}

// runeToByte inverts byteToRune.
func runeToByte() map[rune]byte {
	t := byteToRune()
	m := make(map[rune]byte, 256)
	for b, r := range t {
		m[r] = byte(b)
	}
	return m
}

// decodeByteLevel turns a vocab string back into the raw bytes it stands for; ok is false when
// it holds a rune outside the table.
func decodeByteLevel(s string, inv map[rune]byte) (string, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := inv[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}
