import ServiceKit

@main
enum AuthMain {
    static func main() async {
        await ServiceLauncher.main(AuthService.definition)
    }
}
