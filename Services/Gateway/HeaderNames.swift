import ServiceKit

/// A header name the gateway acts on: hop-by-hop, set by the gateway only, or read to route a
/// request. `KnownHeader.of(_:)` finds one with at most a length check and a comparison or two, where
/// copying the headers and removing names one by one (each a scan, with a lowercased copy and a set
/// lookup per header) was a tenth of the gateway's instructions per request.
struct KnownHeader: Sendable {
    /// The name in lower case.
    let name: String
    /// Never forwarded (`ProxyMiddleware.hopByHop`).
    let hopByHop: Bool
    /// Only the gateway sets it (`ProxyMiddleware.gatewaySets`).
    let gatewaySets: Bool

    /// The known names by length: a header is compared with the few of its own length only.
    private static let byLength: [[KnownHeader]] = {
        let names = Set(ProxyMiddleware.hopByHop + ProxyMiddleware.gatewaySets + ["content-length", "origin", "authorization"])
        var table = [[KnownHeader]](repeating: [], count: (names.map(\.utf8.count).max() ?? 0) + 1)
        for name in names.sorted() {
            table[name.utf8.count].append(
                KnownHeader(
                    name: name, hopByHop: ProxyMiddleware.hopByHop.contains(name),
                    gatewaySets: ProxyMiddleware.gatewaySets.contains(name)))
        }
        return table
    }()

    static func of(_ name: String) -> KnownHeader? {
        let length = name.utf8.count
        guard length < byLength.count else { return nil }
        for known in byLength[length] where name.isHeaderName(known.name) { return known }
        return nil
    }
}

extension String {
    /// Whether this header name is `other`, ignoring ASCII case. Lengths are compared first, so most
    /// names are ruled out without reading a byte.
    func isHeaderName(_ other: String) -> Bool {
        guard utf8.count == other.utf8.count else { return false }
        // On the bytes themselves: zipping the two UTF-8 views checked every index (a twentieth of
        // the gateway's instructions per request).
        let fast = utf8.withContiguousStorageIfAvailable { name in
            other.utf8.withContiguousStorageIfAvailable { other in
                for i in 0..<name.count where Self.asciiLower(name[i]) != Self.asciiLower(other[i]) { return false }
                return true
            }
        }
        if let fast = fast ?? nil { return fast }
        return zip(utf8, other.utf8).allSatisfy { Self.asciiLower($0) == Self.asciiLower($1) }
    }

    private static func asciiLower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }
}

extension [String] {
    /// Whether a header named `name` is among these names, ignoring ASCII case.
    func contains(headerName name: String) -> Bool {
        !isEmpty && contains { name.isHeaderName($0) }
    }
}
