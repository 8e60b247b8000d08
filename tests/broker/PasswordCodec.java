// Kafka's dynamic-password encoding done with the JDK's own crypto (the facts of server-common's
// EncryptingPasswordEncoder / IvParamsEncoder / GcmParamsEncoder), to check tidelog's encoding against the JVM:
//   java PasswordCodec decode <secret> <encoded>    -> prints the password
//   java PasswordCodec encode <secret> <password> <cipher>  -> prints the CSV map
import java.nio.charset.StandardCharsets;
import java.security.AlgorithmParameters;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Collectors;
import javax.crypto.Cipher;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

public class PasswordCodec {
    static SecretKeySpec key(String secret, String factory, String cipher, int len, byte[] salt, int iter) throws Exception {
        PBEKeySpec spec = new PBEKeySpec(secret.toCharArray(), salt, iter, len);
        String alg = cipher.indexOf('/') > 0 ? cipher.substring(0, cipher.indexOf('/')) : cipher;
        return new SecretKeySpec(SecretKeyFactory.getInstance(factory).generateSecret(spec).getEncoded(), alg);
    }

    public static void main(String[] args) throws Exception {
        String secret = args[1];
        if (args[0].equals("decode")) {
            Map<String, String> p = new HashMap<>();
            for (String item : args[2].split(",")) {
                int i = item.indexOf(':');
                p.put(item.substring(0, i), item.substring(i + 1));
            }
            String cipherAlg = p.get("cipherAlgorithm");
            Cipher c = Cipher.getInstance(cipherAlg);
            SecretKeySpec k = key(secret, p.get("keyFactoryAlgorithm"), cipherAlg, Integer.parseInt(p.get("keyLength")),
                    Base64.getDecoder().decode(p.get("salt")), Integer.parseInt(p.get("iterations")));
            byte[] iv = Base64.getDecoder().decode(p.get("initializationVector"));
            if (cipherAlg.startsWith("AES/GCM/"))
                c.init(Cipher.DECRYPT_MODE, k, new GCMParameterSpec(Integer.parseInt(p.get("authenticationTagLength")), iv));
            else
                c.init(Cipher.DECRYPT_MODE, k, new IvParameterSpec(iv));
            String pw = new String(c.doFinal(Base64.getDecoder().decode(p.get("encryptedPassword"))), StandardCharsets.UTF_8);
            if (pw.length() != Integer.parseInt(p.get("passwordLength"))) throw new IllegalStateException("length");
            System.out.print(pw);
        } else {
            String cipherAlg = args[3];
            byte[] salt = new byte[256];
            new SecureRandom().nextBytes(salt);
            Cipher c = Cipher.getInstance(cipherAlg);
            c.init(Cipher.ENCRYPT_MODE, key(secret, "PBKDF2WithHmacSHA512", cipherAlg, 128, salt, 4096));
            byte[] enc = c.doFinal(args[2].getBytes(StandardCharsets.UTF_8));
            Map<String, String> m = new HashMap<>();
            m.put("keyFactoryAlgorithm", "PBKDF2WithHmacSHA512");
            m.put("cipherAlgorithm", cipherAlg);
            m.put("keyLength", "128");
            m.put("salt", Base64.getEncoder().encodeToString(salt));
            m.put("iterations", "4096");
            m.put("encryptedPassword", Base64.getEncoder().encodeToString(enc));
            m.put("passwordLength", String.valueOf(args[2].length()));
            AlgorithmParameters params = c.getParameters();
            if (cipherAlg.startsWith("AES/GCM/")) {
                GCMParameterSpec g = params.getParameterSpec(GCMParameterSpec.class);
                m.put("initializationVector", Base64.getEncoder().encodeToString(g.getIV()));
                m.put("authenticationTagLength", String.valueOf(g.getTLen()));
            } else {
                m.put("initializationVector", Base64.getEncoder().encodeToString(params.getParameterSpec(IvParameterSpec.class).getIV()));
            }
            System.out.print(m.entrySet().stream().map(e -> e.getKey() + ":" + e.getValue()).collect(Collectors.joining(",")));
        }
    }
}
