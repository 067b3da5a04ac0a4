import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The address of the client behind a request. Services sit behind the gateway, which replaces
/// `X-Forwarded-For` with the peer it saw; that header is believed only when the request comes from a
/// loopback or private address (the gateway), so a client reaching a service directly from outside
/// cannot pick its own address to dodge a per-IP limit.
public enum ClientAddress {
    public static func of(_ request: Request, peer: SocketAddress?) -> String {
        let peerIP = peer?.ipAddress ?? "unknown"
        guard isInternal(peerIP), let forwarded = request.headers[HTTPField.Name("X-Forwarded-For")!] else { return peerIP }
        let last = forwarded.split(separator: ",").last.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        return last.isEmpty ? peerIP : String(last.prefix(64))
    }

    static func isInternal(_ ip: String) -> Bool {
        if ip == "::1" || ip.hasPrefix("127.") || ip.hasPrefix("10.") || ip.hasPrefix("192.168.") || ip.lowercased().hasPrefix("fd") || ip.lowercased().hasPrefix("fc") {
            return true
        }
        if ip.hasPrefix("172."), let second = ip.split(separator: ".").dropFirst().first.flatMap({ Int($0) }), (16...31).contains(second) { return true }
        return ip.hasPrefix("::ffff:127.")
    }
}
