import ServiceKitCore
extension String {
    /// The length the API's text limits are given in: Unicode code points, as JSON Schema's
    /// `maxLength` counts them. Not `count`, which counts grapheme clusters: a letter followed by
    /// thousands of combining marks is one `Character`, so a limit counted that way lets a field
    /// through at megabytes, and past the ~2.7 kB PostgreSQL takes in a B-tree index entry (a 500
    /// instead of a 400 naming the field).
    public var codePoints: Int { unicodeScalars.count }
}
