import Foundation
import ServiceKitCore
import ServiceKitDatabase
#if canImport(Glibc)
import Glibc
#endif

/// The proxies whose `X-Forwarded-For` is believed (`TRUSTED_PROXIES`): a list of networks such as
/// `10.0.0.0/8, ::1/128`, or `none`. Services trust the loopback and private networks by default
/// (the gateway reaches them there); the gateway trusts none by default, being the edge, and is told
/// the load balancer's network when it sits behind one.
public struct TrustedProxies: Sendable, Equatable {
    struct Network: Sendable, Equatable {
        var address: [UInt8]  // 4 or 16 bytes
        var prefixLength: Int

        func contains(_ other: [UInt8]) -> Bool {
            guard other.count == address.count else { return false }
            let whole = prefixLength / 8, bits = prefixLength % 8
            guard address.prefix(whole) == other.prefix(whole) else { return false }
            guard bits > 0 else { return true }
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            return address[whole] & mask == other[whole] & mask
        }
    }

    var networks: [Network]

    public static let none = TrustedProxies(networks: [])
    public static let privateNetworks = try! TrustedProxies(parsing: "127.0.0.0/8, ::1/128, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7")

    init(networks: [Network]) {
        self.networks = networks
    }

    /// Parses the setting; the error names every entry that is not an address or a network.
    public init(parsing text: String) throws(TrustedProxiesError) {
        var networks: [Network] = []
        var bad: [String] = []
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        if entries == ["none"] {
            self.init(networks: [])
            return
        }
        for entry in entries {
            let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard let address = Self.bytes(of: parts[0]) else { bad.append(entry); continue }
            let maximum = address.count * 8
            guard let length = parts.count == 2 ? Int(parts[1]) : maximum, (0...maximum).contains(length) else { bad.append(entry); continue }
            networks.append(Network(address: address, prefixLength: length))
        }
        if !bad.isEmpty { throw TrustedProxiesError(entries: bad) }
        self.init(networks: networks)
    }

    public func contains(_ ip: String) -> Bool {
        guard let address = Self.bytes(of: ip) else { return false }
        return networks.contains { $0.contains(address) }
    }

    /// The client behind a chain of proxies: walking `X-Forwarded-For` from the right, starting at the
    /// peer, the first address that is not a trusted proxy (each trusted hop vouches only for the one
    /// before it). A client's own entries at the left are never reached while a hop it does not control
    /// stands in between. An entry that is not an address (empty, `ip:port`, a name) stops the walk at
    /// the hop that sent it, so it cannot become a fresh key for a per-IP limit; the address comes
    /// back in one canonical form (`::ffff:1.2.3.4` is `1.2.3.4`).
    public func client(peer: String, forwardedFor: String?) -> String {
        var current = Self.canonical(peer) ?? peer
        guard let forwardedFor else { return current }
        var chain = forwardedFor.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        while contains(current), let previous = chain.popLast() {
            guard previous.count <= 64, let address = Self.canonical(previous) else { break }
            current = address
        }
        return current
    }

    /// What a per-client limit counts a client address by: an IPv4 address whole, an IPv6 address
    /// by its /64 (`2001:db8:1:2::/64`), the network one subscriber is given and picks any address
    /// in, so that a client cannot get a fresh count per request by moving within it.
    public static func limitKey(_ address: String) -> String {
        guard address.contains(":"), let bytes = bytes(of: address), bytes.count == 16 else { return address }
        let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }

    static func canonical(_ text: String) -> String? {
        // A plain dotted quad is its own canonical form.
        if ipv4(text) != nil { return text }
        guard var bytes = bytes(of: text) else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        guard inet_ntop(family, &bytes, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// An IPv4 address as 4 bytes, an IPv6 one as 16 (an IPv4-mapped IPv6 address as its IPv4 bytes).
    static func bytes(of text: String) -> [UInt8]? {
        if let value = ipv4(text) {
            return [UInt8(truncatingIfNeeded: value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
        }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF { return Array(bytes[12...]) }
        return bytes
    }
}

extension TrustedProxies {
    /// An IPv4 address written as `inet_pton` reads one (four decimal parts of 0–255, no leading
    /// zeros), parsed here: `inet_pton`, `inet_ntop` and their arrays cost some 4k instructions for
    /// the peer of every request and for each X-Forwarded-For entry. Anything else is left to them.
    static func ipv4(_ text: String) -> UInt32? {
        var value: UInt32 = 0, part: UInt32 = 0, digits = 0, parts = 0
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if digits > 0 && part == 0 { return nil }  // a leading zero
                part = part * 10 + UInt32(byte - UInt8(ascii: "0"))
                digits += 1
                guard part <= 255 else { return nil }
            case UInt8(ascii: "."):
                guard digits > 0, parts < 3 else { return nil }
                value = value << 8 | part
                part = 0; digits = 0; parts += 1
            default:
                return nil
            }
        }
        guard digits > 0, parts == 3 else { return nil }
        return value << 8 | part
    }
}

public struct TrustedProxiesError: Error, Sendable {
    package var entries: [String]
}

extension EnvironmentReader {
    /// `TRUSTED_PROXIES`-style settings: networks separated by commas, or `none`.
    public mutating func trustedProxies(_ name: String, default fallback: TrustedProxies) -> TrustedProxies {
        guard let text = values[name] else { return fallback }
        if text.trimmingCharacters(in: .whitespaces).isEmpty {
            report("\(name): is set but empty (use none to trust no proxy)")
            return fallback
        }
        do {
            return try TrustedProxies(parsing: text)
        } catch {
            report("\(name): not an address or network (such as 10.0.0.0/8): \(error.entries.joined(separator: ", "))")
            return fallback
        }
    }
}
