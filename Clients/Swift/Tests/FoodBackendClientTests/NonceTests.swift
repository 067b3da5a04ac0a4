import Foundation
import Testing

@testable import FoodBackendClient

@Suite(.timeLimit(.minutes(1))) struct NonceTests {
    @Test func theAppleNonceIsTheRawNoncesSHA256InLowercaseHex() {
        // SHA-256("abc"), the FIPS 180-2 example.
        let nonce = SignInNonce(raw: "abc", expiresAt: Date())
        #expect(nonce.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
