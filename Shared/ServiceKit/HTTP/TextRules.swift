extension String {
    /// The length the API's text limits are given in: Unicode code points, as JSON Schema's
    /// `maxLength` counts them. Not `count`, which counts grapheme clusters: a letter followed by
    /// thousands of combining marks is one `Character`, so a limit counted that way lets a field
    /// through at megabytes, and past the ~2.7 kB PostgreSQL takes in a B-tree index entry (a 500
    /// instead of a 400 naming the field).
    public var codePoints: Int { unicodeScalars.count }

    /// Whether the text holds a character no name or short text a person writes needs: a control
    /// character (NUL among them, which PostgreSQL refuses in text), or an invisible format character
    /// (Unicode category Cf): bidirectional overrides and isolates (U+202E makes "gpj.exe" read
    /// "exe.jpg"), zero-width spaces and non-joiners, word joiners, byte-order marks. Two format
    /// characters emoji need stay allowed: the zero-width joiner of sequences such as 👩‍🍳, and the
    /// tag characters of subdivision flags. `allowing` names control characters to let through
    /// (a bio's line breaks).
    public func hasInvisibleCharacters(allowing allowed: Set<Unicode.Scalar> = []) -> Bool {
        unicodeScalars.contains { scalar in
            if allowed.contains(scalar) { return false }
            switch scalar.properties.generalCategory {
            case .control: return true
            case .format: return !(scalar.value == 0x200D || (0xE0020...0xE007F).contains(scalar.value))
            default: return false
            }
        }
    }

    /// This text without the characters `hasInvisibleCharacters` refuses: for a name that comes from
    /// elsewhere (an identity provider) and must be cleaned rather than refused.
    public var withoutInvisibleCharacters: String {
        var cleaned = String.UnicodeScalarView()
        for scalar in unicodeScalars where !String(scalar).hasInvisibleCharacters() { cleaned.append(scalar) }
        return String(cleaned)
    }
}
