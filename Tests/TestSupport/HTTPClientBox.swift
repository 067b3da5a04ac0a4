import AsyncHTTPClient

/// One HTTP client for the whole test process.
public enum HTTPClientBox {
    public static let shared = HTTPClient(eventLoopGroupProvider: .singleton)
}
