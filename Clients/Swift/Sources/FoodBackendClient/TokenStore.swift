import Foundation

/// The tokens of one signed-in session, as the app keeps them between launches.
public struct StoredTokens: Codable, Sendable, Equatable {
    public var accessToken: String
    public var refreshToken: String

    public init(accessToken: String, refreshToken: String) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
    }
}

/// Where the session's tokens live. `FoodBackend` reads it once, writes it after every sign-in and
/// refresh, and clears it on sign-out.
public protocol TokenStore: Sendable {
    func load() async throws -> StoredTokens?
    func save(_ tokens: StoredTokens) async throws
    func clear() async throws
}

/// Tokens kept only while the process runs: tests, command-line tools, and Linux.
public actor InMemoryTokenStore: TokenStore {
    private var tokens: StoredTokens?

    public init(_ tokens: StoredTokens? = nil) { self.tokens = tokens }

    public func load() -> StoredTokens? { tokens }
    public func save(_ tokens: StoredTokens) { self.tokens = tokens }
    public func clear() { tokens = nil }
}

#if canImport(Security)
import Security

/// Tokens in the Keychain, readable after the device's first unlock (so a background refresh works)
/// and never synced to other devices.
public struct KeychainTokenStore: TokenStore {
    public let service: String
    public let account: String

    public init(service: String = "FoodBackendClient", account: String = "session") {
        self.service = service
        self.account = account
    }

    private var query: [String: Any] {
        [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service, kSecAttrAccount as String: account]
    }

    public func load() async throws -> StoredTokens? {
        var search = query
        search[kSecReturnData as String] = true
        search[kSecMatchLimit as String] = kSecMatchLimitOne
        var item: CFTypeRef?
        let status = SecItemCopyMatching(search as CFDictionary, &item)
        if status == errSecItemNotFound { return nil }
        guard status == errSecSuccess, let data = item as? Data else { throw KeychainError(status: status) }
        return try JSONDecoder().decode(StoredTokens.self, from: data)
    }

    public func save(_ tokens: StoredTokens) async throws {
        let data = try JSONEncoder().encode(tokens)
        let attributes: [String: Any] = [
            kSecValueData as String: data, kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
        ]
        let status = SecItemUpdate(query as CFDictionary, attributes as CFDictionary)
        if status == errSecItemNotFound {
            let added = SecItemAdd(query.merging(attributes) { $1 } as CFDictionary, nil)
            guard added == errSecSuccess else { throw KeychainError(status: added) }
        } else if status != errSecSuccess {
            throw KeychainError(status: status)
        }
    }

    public func clear() async throws {
        let status = SecItemDelete(query as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else { throw KeychainError(status: status) }
    }
}

public struct KeychainError: Error, Sendable {
    public let status: OSStatus
}
#endif

extension FoodBackend {
    /// The Keychain on Apple's platforms, memory elsewhere.
    public static func defaultTokenStore() -> any TokenStore {
        #if canImport(Security)
        KeychainTokenStore()
        #else
        InMemoryTokenStore()
        #endif
    }
}
