import Crypto

enum LuaScript {
    static func sha1(_ script: String) -> String {
        Insecure.SHA1.hash(data: Array(script.utf8)).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
