/* horovodrun: entry point (being assembled). */
int main(void) {
    return 0;
}
