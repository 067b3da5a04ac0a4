/// A likely typo of a common mail domain (`gmial.com`, `yaho.com`, `hotmial.com`, `gmail.con`): the
/// address the coach probably meant. An invitation to a domain nobody has goes nowhere, and the coach
/// would only learn of it from a client who never heard of them.
enum EmailSuggestion {
    static let commonDomains = [
        "gmail.com", "googlemail.com", "yahoo.com", "yahoo.co.uk", "yahoo.fr", "ymail.com", "hotmail.com", "hotmail.co.uk", "hotmail.fr",
        "outlook.com", "live.com", "msn.com", "icloud.com", "me.com", "mac.com", "aol.com", "protonmail.com", "proton.me", "gmx.com", "gmx.de",
        "gmx.net", "web.de", "mail.com", "yandex.ru", "mail.ru", "comcast.net", "verizon.net", "att.net", "orange.fr", "free.fr",
    ]

    /// The corrected address, or nil when the domain is a common one or not close to any.
    static func suggestion(for email: String) -> String? {
        guard let at = email.lastIndex(of: "@") else { return nil }
        let local = email[..<at]
        let domain = email[email.index(after: at)...].lowercased()
        guard !commonDomains.contains(domain) else { return nil }
        var best: (domain: String, distance: Int)?
        for candidate in commonDomains {
            // One edit in a short name, two in a longer one: `gmai.com`, `hotmial.com`; never `gmx.de` for `gmx.at`.
            let allowed = candidate.count >= 9 ? 2 : 1
            let distance = editDistance(domain, candidate, limit: allowed)
            if distance <= allowed, distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        return best.map { "\(local)@\($0.domain)" }
    }

    /// Edits (insert, delete, replace, swap two neighbours) from `a` to `b`, stopping past `limit`.
    static func editDistance(_ a: String, _ b: String, limit: Int) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard abs(a.count - b.count) <= limit else { return limit + 1 }
        var previous2 = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            current[0] = i
            for j in 1...max(b.count, 1) where !b.isEmpty {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { current[j] = min(current[j], previous2[j - 2] + 1) }
            }
            (previous2, previous, current) = (previous, current, previous2)
        }
        return a.isEmpty ? b.count : b.isEmpty ? a.count : previous[b.count]
    }
}
